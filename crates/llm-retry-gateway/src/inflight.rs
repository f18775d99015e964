//! Requests in flight, counted until their answer's body ends, so a
//! shutdown can wait for streams to finish.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::Notify;

/// The count of requests in flight, and a way to wait for it to reach zero.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

impl InFlight {
    /// A request starts: counted until the guard is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> Guard {
        self.count.fetch_add(1, Ordering::SeqCst);
        Guard(Arc::clone(self))
    }

    /// Requests in flight now.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Resolves when no request is in flight.
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// One request in flight.
#[derive(Debug)]
pub(crate) struct Guard(Arc<InFlight>);

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

pin_project! {
    /// An answer's body that keeps its request counted until it ends or is dropped.
    pub(crate) struct Counted<B> {
        #[pin]
        inner: B,
        guard: Option<Guard>,
    }
}

impl<B> Counted<B> {
    pub(crate) fn new(inner: B, guard: Guard) -> Counted<B> {
        Counted {
            inner,
            guard: Some(guard),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let frame = this.inner.poll_frame(cx);
        if matches!(frame, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.guard.take();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
