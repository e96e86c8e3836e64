//! A connection's HTTP/2 streams, run on the connection's own task.
//!
//! hyper hands each HTTP/2 stream to an executor. With tokio's, every stream
//! is a task of its own, and a poll's bytes go from the connection's task to
//! the stream's and back: on a runtime with more than one worker, often
//! through another core, which wakes up to take the stream. Envoy polls over
//! one HTTP/2 connection, so each of its polls would pay that trip.
//!
//! Here the executor only queues a stream ([`StreamQueue`]); [`Driven`]
//! polls the connection and its streams together, as one future, on the
//! task that runs the connection. A wake-up that the connection and its
//! streams give each other while they are polled is taken in the same
//! poll (a few rounds at most, then the task yields), not through the
//! scheduler. The connection and its streams share one task's tokio
//! budget; once it is spent, tokio defers its resources' wake-ups until
//! the task yields, so the rounds end there. Connections
//! still spread over the workers; one connection's streams share its core.
//! HTTP/1.1 hands nothing to the executor.
//!
//! A stream that panics ends alone, as a task would. When the connection's
//! future ends, its streams end with it: hyper ends
//! it once the HTTP/2 connection is closed, when no stream can still send.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use futures::stream::FuturesUnordered;
use futures::task::AtomicWaker;
use futures::{FutureExt, StreamExt};

/// A stream's future, as queued.
type StreamFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Rounds of polling (connection, then streams) in one poll of [`Driven`]
/// while they keep waking each other; then the task yields to the others.
const ROUNDS_PER_POLL: usize = 8;

/// hyper's executor for one connection: it queues each stream for the
/// connection's [`Driven`] future instead of spawning it.
#[derive(Clone, Default)]
pub(super) struct StreamQueue(Arc<Queued>);

#[derive(Default)]
struct Queued {
    /// Set when a stream is queued: most polls of a connection find none,
    /// and then take no lock.
    any: AtomicBool,
    streams: Mutex<Vec<StreamFuture>>,
}

impl StreamQueue {
    /// Whether a stream was queued since the last [`take`](Self::take).
    fn has_queued(&self) -> bool {
        self.0.any.load(Ordering::Acquire)
    }

    fn take(&self) -> Vec<StreamFuture> {
        if !self.0.any.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *crate::sync::lock(&self.0.streams))
    }
}

impl<F> hyper::rt::Executor<F> for StreamQueue
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        // A stream that panics ends alone, as a task of its own would (the
        // panic hook has printed it): not its connection's other streams.
        let stream = AssertUnwindSafe(stream).catch_unwind().map(drop);
        crate::sync::lock(&self.0.streams).push(Box::pin(stream));
        self.0.any.store(true, Ordering::Release);
    }
}

/// Catches the wake-ups given while [`Driven`] polls (they only ask for
/// another round) and passes the others to the task's own waker.
#[derive(Default)]
struct RoundWaker {
    polling: AtomicBool,
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for RoundWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.woken.store(true, Ordering::SeqCst);
            // The round may have ended between the two: then the task
            // must hear it (at worst it is polled once for nothing).
            if self.polling.load(Ordering::SeqCst) {
                return;
            }
        }
        self.task.wake();
    }
}

/// A connection's future and its streams, polled together.
pub(super) struct Driven<C> {
    conn: Pin<Box<C>>,
    queue: StreamQueue,
    streams: FuturesUnordered<StreamFuture>,
    round: Arc<RoundWaker>,
    waker: Waker,
}

impl<C: Future> Driven<C> {
    /// `conn` served with `queue` as its executor.
    pub(super) fn new(conn: C, queue: StreamQueue) -> Self {
        let round = Arc::new(RoundWaker::default());
        Self {
            conn: Box::pin(conn),
            queue,
            streams: FuturesUnordered::new(),
            waker: Waker::from(round.clone()),
            round,
        }
    }

    /// The connection's future (to ask it to shut down gracefully).
    pub(super) fn conn(&mut self) -> Pin<&mut C> {
        self.conn.as_mut()
    }
}

impl<C: Future> Future for Driven<C> {
    type Output = C::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let Self {
            conn,
            queue,
            streams,
            round,
            waker,
        } = &mut *self;
        round.task.register(cx.waker());
        let mut inner = Context::from_waker(waker);
        for _ in 0..ROUNDS_PER_POLL {
            round.woken.store(false, Ordering::SeqCst);
            round.polling.store(true, Ordering::SeqCst);
            if let Poll::Ready(out) = conn.as_mut().poll(&mut inner) {
                round.polling.store(false, Ordering::SeqCst);
                return Poll::Ready(out);
            }
            loop {
                streams.extend(queue.take());
                if let Poll::Ready(Some(())) = streams.poll_next_unpin(&mut inner) {
                    continue;
                }
                // A stream may have queued another (an upgrade).
                if !queue.has_queued() {
                    break;
                }
            }
            round.polling.store(false, Ordering::SeqCst);
            if !round.woken.swap(false, Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        // Still waking each other: let the other tasks run first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// A stream queued while the connection is polled runs in that same
    /// poll, on the connection's task.
    #[tokio::test]
    async fn a_queued_stream_runs_on_the_connections_task() {
        let queue = StreamQueue::default();
        let ran = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let conn = {
            let (queue, ran) = (queue.clone(), ran.clone());
            async move {
                let task = tokio::task::try_id();
                let seen = ran.clone();
                queue.execute(async move {
                    assert_eq!(
                        tokio::task::try_id(),
                        task,
                        "the stream ran on another task"
                    );
                    seen.fetch_add(1, Ordering::SeqCst);
                });
                let _ = rx.await;
                "closed"
            }
        };
        let mut driven = Driven::new(conn, queue);
        let polled = futures::poll!(&mut driven);
        assert!(polled.is_pending());
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(driven.streams.len(), 0, "a finished stream is dropped");
        tx.send(()).expect("the connection waits");
        assert_eq!(driven.await, "closed");
    }

    /// A stream woken from elsewhere (a held poll's change) wakes the
    /// task, and the connection ending drops streams still running.
    #[tokio::test]
    async fn a_stream_woken_from_elsewhere_is_polled_again() {
        let queue = StreamQueue::default();
        let (change_tx, change_rx) = tokio::sync::oneshot::channel::<u32>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<u32>();
        let (close_tx, close_rx) = tokio::sync::oneshot::channel::<()>();
        let dropped = Arc::new(AtomicBool::new(false));
        queue.execute(async move {
            let got = change_rx.await.unwrap_or(0);
            let _ = done_tx.send(got);
        });
        let guard = DropFlag(dropped.clone());
        queue.execute(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        let driven = Driven::new(
            async move {
                let _ = close_rx.await;
            },
            queue,
        );
        let task = tokio::spawn(driven);
        tokio::time::sleep(Duration::from_millis(20)).await;
        change_tx.send(7).expect("the stream waits");
        assert_eq!(answer_within(done_rx, "the woken stream").await, 7);
        assert!(!dropped.load(Ordering::SeqCst));
        close_tx.send(()).expect("the connection waits");
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the connection ended")
            .expect("no panic");
        assert!(
            dropped.load(Ordering::SeqCst),
            "a stream outlived its connection"
        );
    }

    /// A stream that keeps waking itself does not hold the thread: one
    /// poll gives it a few rounds, then returns, asking to be polled again.
    #[test]
    fn a_stream_waking_itself_gets_a_few_rounds_per_poll() {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let queue = StreamQueue::default();
            let spins = Arc::new(AtomicUsize::new(0));
            let counted = spins.clone();
            queue.execute(futures::future::poll_fn(move |cx| {
                counted.fetch_add(1, Ordering::SeqCst);
                cx.waker().wake_by_ref();
                Poll::<()>::Pending
            }));
            let mut driven = Driven::new(std::future::pending::<()>(), queue);
            let woken = Arc::new(Counted::default());
            let waker = Waker::from(woken.clone());
            let polled = Pin::new(&mut driven).poll(&mut Context::from_waker(&waker));
            let _ = done_tx.send((
                polled.is_pending(),
                spins.load(Ordering::SeqCst),
                woken.0.load(Ordering::SeqCst),
            ));
        });
        let (pending, spins, woken) = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("one poll of a connection never returned");
        assert!(pending);
        assert!(
            (1..=ROUNDS_PER_POLL * 2).contains(&spins),
            "{spins} rounds in one poll"
        );
        assert_eq!(woken, 1, "the task must be polled again");
    }

    /// Once the task's tokio budget is spent, a poll ends its rounds: tokio
    /// defers the wake-up of a resource that found it spent until the task
    /// yields (were it to wake at once, each round would poll the stream
    /// again for nothing).
    #[tokio::test]
    async fn a_spent_budget_ends_the_rounds() {
        let queue = StreamQueue::default();
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = polls.clone();
        queue.execute(async move {
            loop {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::task::coop::consume_budget().await;
            }
        });
        let mut driven = Driven::new(std::future::pending::<()>(), queue);
        assert!(futures::poll!(&mut driven).is_pending());
        let polls = polls.load(Ordering::SeqCst);
        // tokio's budget is 128 a poll: the stream ran until it was spent,
        // and not once a round after that.
        assert!((100..=130).contains(&polls), "{polls} polls of the stream");
    }

    #[derive(Default)]
    struct Counted(AtomicUsize);
    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A stream that panics ends alone; the connection and its other
    /// streams go on.
    #[tokio::test]
    async fn a_stream_that_panics_ends_alone() {
        let queue = StreamQueue::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        queue.execute(async {
            panic!("a stream's bug (this test's: expected)");
        });
        let (answer_tx, answer_rx) = tokio::sync::oneshot::channel::<u32>();
        queue.execute(async move {
            let _ = answer_tx.send(rx.await.unwrap_or(0) + 1);
        });
        let task = tokio::spawn(Driven::new(std::future::pending::<()>(), queue));
        tokio::time::sleep(Duration::from_millis(20)).await;
        tx.send(41).expect("the second stream waits");
        assert_eq!(answer_within(answer_rx, "the other stream").await, 42);
        assert!(!task.is_finished(), "the connection ended with the panic");
        task.abort();
    }

    /// What a stream sends on `rx`, within 5 s.
    async fn answer_within(rx: tokio::sync::oneshot::Receiver<u32>, stream: &str) -> u32 {
        tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .unwrap_or_else(|_| panic!("{stream} did not answer within 5 s"))
            .unwrap_or_else(|_| panic!("{stream} ended without answering"))
    }

    struct DropFlag(Arc<AtomicBool>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}
