//! A connection's transport that notes every write moving bytes, so a
//! stream whose client stopped reading can be told from one that is quiet.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite};

use super::activity::Activity;

/// A connection's transport, noting every write that moves bytes.
pub(super) struct CountedIo<I> {
    pub(super) inner: I,
    pub(super) activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for CountedIo<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> CountedIo<I> {
    fn noted(&self, polled: Poll<std::io::Result<usize>>) -> Poll<std::io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                self.activity.wrote(n);
            }
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for CountedIo<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.noted(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.noted(polled)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::activity::StreamOpen;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn a_write_that_moves_bytes_is_noted_and_a_read_is_not() {
        let activity = Arc::new(Activity::new());
        let _stream = StreamOpen::new(activity.clone());
        let (near, mut far) = tokio::io::duplex(64);
        let mut io = CountedIo {
            inner: near,
            activity: activity.clone(),
        };
        tokio::time::advance(Duration::from_secs(5)).await;
        far.write_all(b"request").await.unwrap();
        let mut buf = [0u8; 7];
        io.read_exact(&mut buf).await.unwrap();
        assert_eq!(activity.stalled_for(Instant::now()), Duration::from_secs(5));
        io.write_all(b"answer").await.unwrap();
        assert_eq!(activity.stalled_for(Instant::now()), Duration::ZERO);
    }
}
