//! An answer's body that ends with an error when its upstream goes quiet
//! for too long: a stream that stalls after its first content must not
//! hold a client, a connection and a drain forever.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use llm_retry::BoxError;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The upstream sent nothing for the stream's idle timeout.
#[derive(Debug)]
pub(crate) struct Stalled(Duration);

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the upstream sent nothing for {:?}", self.0)
    }
}

impl std::error::Error for Stalled {}

pin_project! {
    /// `inner`, ended with [`Stalled`] after `timeout` without a frame.
    pub(crate) struct Idle<B> {
        #[pin]
        inner: B,
        #[pin]
        timer: Sleep,
        timeout: Duration,
    }
}

impl<B> Idle<B> {
    pub(crate) fn new(inner: B, timeout: Duration) -> Idle<B> {
        Idle {
            inner,
            timer: tokio::time::sleep(timeout),
            timeout,
        }
    }
}

impl<B> Body for Idle<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(frame) => {
                // A body that ended needs no timer: resetting one that was
                // never polled would register it, only to drop it.
                let more = matches!(frame, Some(Ok(_))) && !this.inner.is_end_stream();
                if more {
                    if let Some(next) = Instant::now().checked_add(*this.timeout) {
                        this.timer.as_mut().reset(next);
                    }
                }
                Poll::Ready(frame.map(|frame| frame.map_err(Into::into)))
            }
            Poll::Pending => match this.timer.poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(Stalled(*this.timeout))))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
