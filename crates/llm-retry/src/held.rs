//! A body that yields bytes already read from its source, then the rest of
//! the source: the shared part of [`RetryBody`](crate::RetryBody) and
//! [`GuardedBody`](crate::stream_guard::GuardedBody).

use crate::size_hint::held_then;
use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Held chunks first, then the source; trailers only when the source had
/// already ended while being read (then there is no rest).
pub(crate) struct Held<B> {
    chunks: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
    rest: Option<Pin<Box<B>>>,
}

impl<B: Body<Data = Bytes>> Held<B> {
    /// `rest` is `None` when the source ended while its start was read.
    pub(crate) fn new(
        chunks: VecDeque<Bytes>,
        trailers: Option<HeaderMap>,
        rest: Option<Pin<Box<B>>>,
    ) -> Held<B> {
        // Trailers seen while reading mean the source already ended.
        let rest = if trailers.is_some() { None } else { rest };
        Held {
            chunks,
            trailers,
            rest,
        }
    }

    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(chunk) = self.chunks.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if let Some(body) = self.rest.as_mut() {
            match body.as_mut().poll_frame(cx) {
                Poll::Ready(None) => self.rest = None,
                Poll::Ready(Some(Err(error))) => {
                    self.rest = None;
                    return Poll::Ready(Some(Err(error)));
                }
                other => return other,
            }
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
            && self.trailers.is_none()
            && self.rest.as_ref().is_none_or(|b| b.is_end_stream())
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        let held: u64 = self.chunks.iter().map(|c| c.len() as u64).sum();
        held_then(held, self.rest.as_ref().map(|b| b.size_hint()))
    }
}
