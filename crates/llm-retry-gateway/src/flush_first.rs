//! An answer body's error held back for one poll. hyper's HTTP/1 server,
//! polled into a body error, closes the connection without writing what
//! it had buffered: the head and the data frames of the same poll run. An
//! upstream cut soon after its content began then reached the client as
//! no answer at all, though the gateway had taken bytes to forward. Given
//! `Pending` first (with a wake), the server flushes them, and the client
//! gets every byte before the cut, then the error: whenever the socket
//! takes that flush at once (it is one chance; a client whose socket
//! buffer is full may still miss the last bytes).

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use llm_retry::BoxError;
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// `inner`, its error handed on one poll after it came.
    pub(crate) struct FlushFirst<B> {
        #[pin]
        inner: B,
        held: Option<BoxError>,
    }
}

impl<B> FlushFirst<B> {
    pub(crate) fn new(inner: B) -> FlushFirst<B> {
        FlushFirst { inner, held: None }
    }
}

impl<B> Body for FlushFirst<B>
where
    B: Body<Data = Bytes, Error = BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if let Some(error) = this.held.take() {
            return Poll::Ready(Some(Err(error)));
        }
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Err(error))) => {
                *this.held = Some(error);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            polled => polled,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.held.is_some() {
            return SizeHint::default();
        }
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use futures_util::task::noop_waker_ref;
    use http_body_util::{BodyExt, StreamBody};

    #[tokio::test]
    async fn an_error_comes_one_poll_after_the_data_before_it() {
        let frames: Vec<Result<Frame<Bytes>, BoxError>> = vec![
            Ok(Frame::data(Bytes::from_static(b"data"))),
            Err("cut".into()),
        ];
        let mut body = FlushFirst::new(StreamBody::new(futures_util::stream::iter(frames)));
        let mut cx = Context::from_waker(noop_waker_ref());
        let mut body = Pin::new(&mut body);
        let first = body.as_mut().poll_frame(&mut cx);
        assert!(matches!(first, Poll::Ready(Some(Ok(_)))));
        assert!(
            body.as_mut().poll_frame(&mut cx).is_pending(),
            "held a poll"
        );
        assert!(!body.is_end_stream());
        let error = body.as_mut().poll_frame(&mut cx);
        assert!(matches!(error, Poll::Ready(Some(Err(e))) if e.to_string() == "cut"));
        assert!(body.frame().await.is_none());
    }
}
