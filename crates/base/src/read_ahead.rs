//! A connection's reads made large. HTTP/2's codec (h2, through
//! `tokio-util`'s framing) reads its transport 8 KiB at a time, so each of
//! Envoy 1.40's 77 KB polls cost ten `recvfrom` calls over HTTP/2 where
//! HTTP/1.1, whose buffer hyper grows, costs one; and each upstream SotW
//! push of 1,000 clusters (93 KB) as many per session. [`ReadAhead`] reads up to
//! [`READ_AHEAD`] bytes at once and hands them out as they are asked for;
//! a read with room for [`DIRECT`] bytes or more goes straight to the
//! transport: copying it through the buffer would cost more than the calls
//! it saves.
//!
//! The buffer is held only while bytes wait in it: it is released once
//! they are handed out, or when the transport had nothing to read, so an
//! idle connection holds none (a gateway holds thousands of idle
//! keep-alive connections and held polls), and a connection whose client
//! sent more than its reader took holds at most [`READ_AHEAD`] bytes here.
//!
//! Under TLS it matters most: rustls reads its records 4 KiB at a time.
//!
//! Over HTTP/1.1 in the clear hyper asks for little room too (its adaptive
//! buffer shrinks between polls), but one read already takes a whole poll:
//! reading ahead would only add a copy. So an accepted connection in the
//! clear reads ahead only once its first bytes are HTTP/2's preface
//! ([`ReadAhead::http2_only`]); under TLS the records are read ahead
//! whatever they carry, so rustls reads large too. The upstream channel's
//! connections (HTTP/2) are made by a [`ReadAheadConnector`].

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use futures::future::{MapOk, TryFutureExt};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How much one read of the transport takes at most, when the reader
/// asked for less: one Envoy poll (77 KB with its node) in one or two
/// calls.
pub const READ_AHEAD: usize = 128 * 1024;

/// A read with room for this much goes straight to the transport. h2
/// asks for 8-16 KiB at a time (a frame or its buffer's room).
pub const DIRECT: usize = 32 * 1024;

/// What an HTTP/2 connection in the clear starts with (RFC 9113, 3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A transport whose small reads are served from one large read.
pub struct ReadAhead<I> {
    inner: I,
    /// Bytes read from `inner` and not yet handed out; empty, without
    /// room, whenever `inner` had nothing more.
    ahead: BytesMut,
    mode: Mode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Always,
    /// Until the first bytes tell whether they are HTTP/2's preface: how
    /// many of its bytes came so far (every read goes through the buffer,
    /// to be looked at).
    IfHttp2(usize),
    Never,
}

impl<I> ReadAhead<I> {
    /// Every small read read ahead.
    pub fn new(inner: I) -> ReadAhead<I> {
        ReadAhead {
            inner,
            ahead: BytesMut::new(),
            mode: Mode::Always,
        }
    }

    /// Small reads read ahead if the first bytes are HTTP/2's preface;
    /// otherwise (HTTP/1.1), only the first read is.
    pub fn http2_only(inner: I) -> ReadAhead<I> {
        ReadAhead {
            mode: Mode::IfHttp2(0),
            ..ReadAhead::new(inner)
        }
    }

    /// Decides [`Mode::IfHttp2`] on the bytes just read (all of `ahead`),
    /// or waits for more if they go on with the preface.
    fn decide(&mut self) {
        let Mode::IfHttp2(seen) = self.mode else {
            return;
        };
        let rest = &HTTP2_PREFACE[seen..];
        let n = self.ahead.len().min(rest.len());
        self.mode = if self.ahead[..n] != rest[..n] {
            Mode::Never
        } else if n == rest.len() {
            Mode::Always
        } else {
            Mode::IfHttp2(seen + n)
        };
    }

    /// Hands out what is ahead, as much as `out` takes; the buffer goes
    /// once it is empty (a reader may not come back for a while: hyper
    /// does not read an HTTP/1.1 connection while its long poll is held).
    fn hand_out(&mut self, out: &mut ReadBuf<'_>) {
        let n = out.remaining().min(self.ahead.len());
        out.put_slice(&self.ahead[..n]);
        self.ahead.advance(n);
        if self.ahead.is_empty() {
            self.ahead = BytesMut::new();
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for ReadAhead<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.ahead.is_empty() {
            this.hand_out(out);
            return Poll::Ready(Ok(()));
        }
        let direct = match this.mode {
            Mode::Never => true,
            Mode::Always => out.remaining() >= DIRECT,
            Mode::IfHttp2(_) => false,
        };
        if direct || out.remaining() == 0 {
            return Pin::new(&mut this.inner).poll_read(cx, out);
        }
        this.ahead.reserve(READ_AHEAD);
        match tokio_util::io::poll_read_buf(Pin::new(&mut this.inner), cx, &mut this.ahead) {
            Poll::Ready(Ok(n)) if n > 0 => {
                this.decide();
                this.hand_out(out);
                Poll::Ready(Ok(()))
            }
            // Nothing to read (or the end, or an error): the room goes.
            other => {
                this.ahead = BytesMut::new();
                other.map_ok(|_| ())
            }
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for ReadAhead<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A connector (a tower service from a URI to a connection, as tonic's
/// `Endpoint` takes) whose connections read through [`ReadAhead`].
#[derive(Clone, Debug)]
pub struct ReadAheadConnector<C>(pub C);

/// One connection of the wrapped connector, read through [`ReadAhead`].
type AheadIo<T> = TokioIo<ReadAhead<T>>;

impl<C, T> tower::Service<http::Uri> for ReadAheadConnector<C>
where
    C: tower::Service<http::Uri, Response = TokioIo<T>>,
    T: AsyncRead + AsyncWrite + Unpin,
{
    type Response = AheadIo<T>;
    type Error = C::Error;
    type Future = MapOk<C::Future, fn(TokioIo<T>) -> AheadIo<T>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let ahead: fn(TokioIo<T>) -> AheadIo<T> =
            |io| TokioIo::new(ReadAhead::new(io.into_inner()));
        self.0.call(uri).map_ok(ahead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;
    use std::collections::VecDeque;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A transport that delivers scripted arrivals (bytes, or a moment with
    /// nothing to read), noting the room of every read it was asked for.
    #[derive(Default)]
    struct Scripted {
        arrivals: VecDeque<Option<Vec<u8>>>,
        pending: Vec<u8>,
        rooms: Vec<usize>,
    }

    impl AsyncRead for Scripted {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            out: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let this = self.get_mut();
            this.rooms.push(out.remaining());
            if this.pending.is_empty() {
                match this.arrivals.pop_front() {
                    Some(Some(bytes)) => this.pending = bytes,
                    Some(None) => {
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    None => return Poll::Ready(Ok(())),
                }
            }
            let n = out.remaining().min(this.pending.len());
            out.put_slice(&this.pending[..n]);
            this.pending.drain(..n);
            Poll::Ready(Ok(()))
        }
    }

    fn scripted(arrivals: Vec<Option<Vec<u8>>>) -> ReadAhead<Scripted> {
        ReadAhead::new(Scripted {
            arrivals: arrivals.into(),
            ..Scripted::default()
        })
    }

    /// Everything `io` gives until its end, read into rooms of `room` bytes.
    async fn read_to_end(io: &mut ReadAhead<Scripted>, room: usize) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; room];
        loop {
            let n = io.read(&mut buf).await.unwrap();
            if n == 0 {
                return got;
            }
            got.extend_from_slice(&buf[..n]);
        }
    }

    #[tokio::test]
    async fn small_reads_are_served_from_one_large_read() {
        let poll: Vec<u8> = (0..77_332u32).map(|i| (i % 251) as u8).collect();
        let mut io = scripted(vec![Some(poll.clone())]);
        let mut frame = [0u8; 8 * 1024];
        let mut got = Vec::new();
        while got.len() < poll.len() {
            let n = io.read(&mut frame).await.unwrap();
            got.extend_from_slice(&frame[..n]);
            let waiting = poll.len() - got.len();
            assert_eq!(io.ahead.len(), waiting);
            if waiting == 0 {
                assert_eq!(io.ahead.capacity(), 0, "handed out, the buffer goes");
            }
        }
        assert_eq!(got, poll);
        assert_eq!(read_to_end(&mut io, 8 * 1024).await, b"");
        // One read took the whole poll; the second found the end.
        assert_eq!(io.inner.rooms, vec![READ_AHEAD, READ_AHEAD]);
    }

    #[tokio::test]
    async fn a_read_with_room_goes_straight_to_the_transport() {
        let poll = vec![7u8; 77_332];
        let mut io = scripted(vec![Some(poll.clone())]);
        let mut room = vec![0u8; DIRECT];
        let n = io.read(&mut room).await.unwrap();
        assert_eq!(n, DIRECT);
        assert_eq!(io.inner.rooms, vec![DIRECT]);
        assert_eq!(io.ahead.capacity(), 0, "nothing went through the buffer");
    }

    #[tokio::test]
    async fn nothing_to_read_releases_the_buffer() {
        let mut io = scripted(vec![Some(b"GET / HTTP/1.1\r\n\r\n".to_vec()), None]);
        let mut frame = [0u8; 1024];
        let n = io.read(&mut frame).await.unwrap();
        assert_eq!(&frame[..n], b"GET / HTTP/1.1\r\n\r\n");
        let pending = std::future::poll_fn(|cx| {
            let mut out = ReadBuf::new(&mut frame);
            Poll::Ready(Pin::new(&mut io).poll_read(cx, &mut out).is_pending())
        })
        .await;
        assert!(pending);
        assert_eq!(io.ahead.capacity(), 0, "an idle connection holds no buffer");
    }

    #[tokio::test]
    async fn http1_in_the_clear_reads_ahead_only_its_first_read() {
        let poll = b"POST /v3/discovery:endpoints HTTP/1.1\r\n".repeat(2_000);
        let (first, rest) = poll.split_at(100);
        let mut io = ReadAhead::http2_only(Scripted {
            arrivals: vec![Some(first.to_vec()), Some(rest.to_vec())].into(),
            ..Scripted::default()
        });
        assert_eq!(read_to_end(&mut io, 8 * 1024).await, poll);
        assert_eq!(io.inner.rooms[0], READ_AHEAD, "the first read is looked at");
        assert!(
            io.inner.rooms[1..].iter().all(|&room| room == 8 * 1024),
            "then every read goes straight through: {:?}",
            io.inner.rooms
        );
    }

    #[tokio::test]
    async fn http2_in_the_clear_reads_ahead_once_its_preface_came_whole() {
        let frames = vec![3u8; 77_332];
        let mut io = ReadAhead::http2_only(Scripted {
            arrivals: vec![
                Some(HTTP2_PREFACE[..5].to_vec()),
                Some(HTTP2_PREFACE[5..].to_vec()),
                Some(frames.clone()),
            ]
            .into(),
            ..Scripted::default()
        });
        let mut preface = [0u8; 24];
        io.read_exact(&mut preface).await.unwrap();
        assert_eq!(preface, HTTP2_PREFACE);
        assert_eq!(io.mode, Mode::Always);
        let mut got = vec![0u8; frames.len()];
        for frame in got.chunks_mut(8 * 1024) {
            io.read_exact(frame).await.unwrap();
        }
        assert_eq!(got, frames);
        assert_eq!(
            io.inner.rooms,
            vec![READ_AHEAD; 3],
            "one read for the frames"
        );
    }

    #[tokio::test]
    async fn writes_go_through_as_they_are() {
        let (near, mut far) = tokio::io::duplex(1024);
        let mut io = ReadAhead::new(near);
        assert_eq!(io.is_write_vectored(), io.inner.is_write_vectored());
        io.write_all(b"answer").await.unwrap();
        io.flush().await.unwrap();
        let mut got = [0u8; 6];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"answer");
    }

    #[tokio::test]
    async fn a_connectors_connections_read_ahead() {
        use tower::Service;
        let (near, mut far) = tokio::io::duplex(256 * 1024);
        let mut near = Some(near);
        let mut connector = ReadAheadConnector(tower::service_fn(move |_: http::Uri| {
            let io = near.take().map(TokioIo::new).ok_or("connected twice");
            async move { io }
        }));
        far.write_all(&[1u8; 40_000]).await.unwrap();
        let io = connector
            .call(http::Uri::from_static("http://127.0.0.1:1"))
            .await
            .unwrap();
        let mut io = io.into_inner();
        let mut frame = [0u8; 8 * 1024];
        assert_eq!(io.read(&mut frame).await.unwrap(), frame.len());
        assert_eq!(io.ahead.len(), 40_000 - frame.len(), "one read took it all");
    }

    /// Whatever the arrivals (sizes, pauses, HTTP/2's preface cut anywhere
    /// or not there), whatever rooms the reader offers, read ahead always
    /// or for HTTP/2 only, the reader gets the transport's bytes, in order,
    /// none twice.
    /// A fresh seed each run, printed; `XDS_READ_AHEAD_SEED` replays one.
    #[tokio::test]
    async fn any_arrivals_and_rooms_give_the_same_bytes() {
        let (seed, mut rng) = crate::testing::seeded_rng("XDS_READ_AHEAD_SEED", "read ahead");
        for case in 0..200 {
            let mut sent = Vec::new();
            let mut arrivals = Vec::new();
            for _ in 0..rng.random_range(0..12) {
                if rng.random_bool(0.3) {
                    arrivals.push(None);
                    continue;
                }
                let mut bytes = vec![0u8; rng.random_range(1..300_000)];
                rng.fill(&mut bytes[..]);
                sent.extend_from_slice(&bytes);
                arrivals.push(Some(bytes));
            }
            if rng.random_bool(0.3) {
                let preface = HTTP2_PREFACE.to_vec();
                let cut = rng.random_range(1..preface.len());
                sent.splice(0..0, preface.iter().copied());
                arrivals.insert(0, Some(preface[cut..].to_vec()));
                arrivals.insert(0, Some(preface[..cut].to_vec()));
            }
            let transport = Scripted {
                arrivals: arrivals.into(),
                ..Scripted::default()
            };
            let mut io = if rng.random_bool(0.5) {
                ReadAhead::new(transport)
            } else {
                ReadAhead::http2_only(transport)
            };
            let mut got = Vec::new();
            loop {
                let mut room = vec![0u8; rng.random_range(1..2 * DIRECT)];
                let n = io.read(&mut room).await.unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&room[..n]);
            }
            assert!(got == sent, "case {case} (seed {seed}): the bytes differ");
        }
    }
}
