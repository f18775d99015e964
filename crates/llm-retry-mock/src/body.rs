//! The response body: whole, streamed event by event, or cut after `n`
//! bytes.
//!
//! Cutting works with the connection (see `conn.rs`): once the last allowed
//! byte was handed to hyper, the next poll asks the connection to close
//! after its next completed flush and stays pending forever, so the body
//! never ends and hyper's buffered bytes reach the socket before the close.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use crate::conn::ConnControl;
use crate::limiter::InFlightSlot;
use crate::reply::{Payload, ResponseReply};

/// The body of every response the mock sends.
#[derive(Debug)]
pub(crate) struct ReplyBody {
    /// Chunks still to send, each after its delay.
    chunks: VecDeque<(Duration, Bytes)>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// Bytes left before the cut, when the reply is cut.
    cut_after: Option<usize>,
    /// Yield once between chunks so hyper flushes each one on its own.
    flush_each: bool,
    yield_next: bool,
    ctl: Arc<ConnControl>,
    /// Its places under in-flight ceilings: given back when the body is
    /// over or dropped (the client gone).
    _slots: Vec<InFlightSlot>,
}

/// Turns a scripted response into an `http::Response` bound to `ctl`'s
/// connection.
pub(crate) fn build_response(
    reply: ResponseReply,
    ctl: Arc<ConnControl>,
    slots: Vec<InFlightSlot>,
) -> Response<ReplyBody> {
    let headers = reply.headers();
    let (chunks, flush_each) = match reply.payload {
        Payload::Whole(bytes) => (VecDeque::from([(Duration::ZERO, bytes)]), false),
        Payload::Events(events) => (
            events.into_iter().map(|e| (e.delay, e.bytes)).collect(),
            true,
        ),
    };
    let body = ReplyBody {
        chunks: chunks.into_iter().filter(|(_, b)| !b.is_empty()).collect(),
        sleep: None,
        cut_after: reply.reset_after,
        flush_each,
        yield_next: false,
        ctl,
        _slots: slots,
    };
    let mut response = Response::new(body);
    *response.status_mut() = reply.status;
    *response.headers_mut() = headers;
    response
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        loop {
            if let Some(left) = this.cut_after {
                if left == 0 || this.chunks.is_empty() {
                    // Everything allowed is in hyper's hands: close after the
                    // flush that writes it, and never end the body.
                    this.ctl.close_after_flush();
                    return Poll::Pending;
                }
            }
            if this.yield_next {
                this.yield_next = false;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let Some((delay, _)) = this.chunks.front_mut() else {
                return Poll::Ready(None);
            };
            if !delay.is_zero() {
                let wait = *delay;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(wait)));
                ready!(sleep.as_mut().poll(cx));
                this.sleep = None;
                *delay = Duration::ZERO;
            }
            let Some((_, mut chunk)) = this.chunks.pop_front() else {
                return Poll::Ready(None);
            };
            if let Some(left) = this.cut_after.as_mut() {
                chunk.truncate(*left);
                *left -= chunk.len();
            }
            this.yield_next =
                this.flush_each && this.chunks.front().is_some_and(|(d, _)| d.is_zero());
            if !chunk.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.cut_after.is_none() && self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        // Whole bodies get a content-length; streams and cut bodies go
        // chunked, so a cut body can never look complete.
        if self.cut_after.is_some() || self.flush_each {
            return SizeHint::default();
        }
        let len: usize = self.chunks.iter().map(|(_, b)| b.len()).sum();
        SizeHint::with_exact(u64::try_from(len).unwrap_or(u64::MAX))
    }
}
