//! The tonic codec of every upstream call: each request written into its
//! frame by [`ToFrame`], each response handed over as its whole frame, one
//! split of tonic's receive buffer with no copy, to [`FromFrame`]. Both are
//! prost's for every message but the two a session's stream carries per
//! push: the request with the session's node, whose held bytes
//! [`super::outbound`] writes as they are, and the SotW `DiscoveryResponse`,
//! which [`super::wire`] reads in place.

use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

use super::wire::SotwResponse;

/// A request message written into its frame.
pub(crate) trait ToFrame: Send + Sync + 'static {
    fn to_frame(self, buf: &mut impl BufMut);
}

impl<T: prost::Message + Send + Sync + 'static> ToFrame for T {
    fn to_frame(self, buf: &mut impl BufMut) {
        self.encode_raw(buf);
    }
}

/// A response message made from its whole frame.
pub(crate) trait FromFrame: Sized + Send + Sync + 'static {
    fn from_frame(frame: Bytes) -> Result<Self, String>;
}

impl<T: prost::Message + Default + Send + Sync + 'static> FromFrame for T {
    fn from_frame(frame: Bytes) -> Result<T, String> {
        T::decode(frame).map_err(|e| e.to_string())
    }
}

impl FromFrame for SotwResponse {
    fn from_frame(frame: Bytes) -> Result<SotwResponse, String> {
        SotwResponse::parse(frame).map_err(|e| e.to_string())
    }
}

/// Requests `Req` out, responses `Resp` in.
pub(crate) struct FrameCodec<Req, Resp>(PhantomData<fn(Req) -> Resp>);

impl<Req, Resp> Default for FrameCodec<Req, Resp> {
    fn default() -> Self {
        FrameCodec(PhantomData)
    }
}

impl<Req, Resp> Codec for FrameCodec<Req, Resp>
where
    Req: ToFrame,
    Resp: FromFrame,
{
    type Encode = Req;
    type Decode = Resp;
    type Encoder = Self;
    type Decoder = Self;

    fn encoder(&mut self) -> Self {
        FrameCodec(PhantomData)
    }

    fn decoder(&mut self) -> Self {
        FrameCodec(PhantomData)
    }
}

/// Writes each request into the frame tonic sends.
impl<Req: ToFrame, Resp: 'static> Encoder for FrameCodec<Req, Resp> {
    type Item = Req;
    type Error = Status;

    fn encode(&mut self, item: Req, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.to_frame(buf);
        Ok(())
    }
}

/// Takes each message's frame whole and makes `Resp` of it.
impl<Req: 'static, Resp: FromFrame> Decoder for FrameCodec<Req, Resp> {
    type Item = Resp;
    type Error = Status;

    /// An undecodable message is an `internal` status, as with tonic's own
    /// prost codec.
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Resp>, Status> {
        let frame = buf.copy_to_bytes(buf.remaining());
        Resp::from_frame(frame).map(Some).map_err(Status::internal)
    }
}
