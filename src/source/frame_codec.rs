//! The tonic codec of every upstream call: requests encoded by prost (its
//! own encoder), each response handed over as its whole frame, one split
//! of tonic's receive buffer with no copy, to [`FromFrame`]. That is
//! prost's decode for every message but one: the SotW `DiscoveryResponse`
//! every session reads per push, which [`super::wire`] reads in place.

use std::marker::PhantomData;

use bytes::{Buf, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstEncoder;

use super::wire::SotwResponse;

/// A response message made from its whole frame.
pub(crate) trait FromFrame: Sized + Send + Sync + 'static {
    /// The message `frame` encodes; the error says why it is none.
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
    Req: prost::Message + Send + 'static,
    Resp: FromFrame,
{
    type Encode = Req;
    type Decode = Resp;
    type Encoder = ProstEncoder<Req>;
    type Decoder = FrameDecoder<Resp>;

    fn encoder(&mut self) -> ProstEncoder<Req> {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> FrameDecoder<Resp> {
        FrameDecoder(PhantomData)
    }
}

/// Takes each message's frame whole and makes `Resp` of it.
pub(crate) struct FrameDecoder<Resp>(PhantomData<fn() -> Resp>);

impl<Resp: FromFrame> Decoder for FrameDecoder<Resp> {
    type Item = Resp;
    type Error = Status;

    /// An undecodable message is an `internal` status, as with tonic's own
    /// prost codec.
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Resp>, Status> {
        let frame = buf.copy_to_bytes(buf.remaining());
        Resp::from_frame(frame).map(Some).map_err(Status::internal)
    }
}
