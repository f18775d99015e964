//! [`GuardedBody`]: the held prefix, then the rest, counted.

use super::error::StreamInterrupted;
use super::{StreamCommit, StreamEnd};
use crate::error::BoxError;
use crate::size_hint::held_then;
use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// The body of a response from [`StreamGuard`](super::StreamGuard).
    ///
    /// Unguarded responses pass straight through. A guarded stream yields the
    /// held prefix unchanged, then the rest of the stream; every byte handed
    /// to the caller is counted in the response's [`StreamCommit`], and a
    /// failure after the first byte ends the body with [`StreamInterrupted`].
    pub struct GuardedBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Passthrough { #[pin] inner: B },
        Guarded {
            held: VecDeque<Bytes>,
            trailers: Option<HeaderMap>,
            rest: Option<Pin<Box<B>>>,
            end: EndOnDrop,
        },
    }
}

/// Records [`StreamEnd::Dropped`] when the body goes away before its end;
/// the first recorded end wins, so this fires at most once.
struct EndOnDrop(StreamCommit);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.set_end(StreamEnd::Dropped);
    }
}

impl<B> GuardedBody<B> {
    pub(super) fn passthrough(inner: B) -> GuardedBody<B> {
        GuardedBody {
            kind: Kind::Passthrough { inner },
        }
    }

    pub(super) fn released(
        held: VecDeque<Bytes>,
        trailers: Option<HeaderMap>,
        rest: Pin<Box<B>>,
        commit: StreamCommit,
    ) -> GuardedBody<B> {
        // Trailers seen while holding mean the body already ended.
        let rest = trailers.is_none().then_some(rest);
        GuardedBody {
            kind: Kind::Guarded {
                held,
                trailers,
                rest,
                end: EndOnDrop(commit),
            },
        }
    }
}

impl<B> std::fmt::Debug for GuardedBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Passthrough { .. } => "passthrough",
            Kind::Guarded { .. } => "guarded",
        };
        f.debug_struct("GuardedBody").field("kind", &kind).finish()
    }
}

impl<B> Body for GuardedBody<B>
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
        match self.project().kind.project() {
            KindProj::Passthrough { inner } => inner.poll_frame(cx).map_err(Into::into),
            KindProj::Guarded {
                held,
                trailers,
                rest,
                end,
            } => {
                let commit = &end.0;
                if let Some(chunk) = held.pop_front() {
                    commit.add_forwarded(chunk.len());
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                let Some(body) = rest.as_mut() else {
                    commit.set_end(StreamEnd::Completed);
                    return Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(t))));
                };
                match body.as_mut().poll_frame(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(None) => {
                        *rest = None;
                        commit.set_end(StreamEnd::Completed);
                        Poll::Ready(None)
                    }
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(data) = frame.data_ref() {
                            commit.add_forwarded(data.len());
                        }
                        Poll::Ready(Some(Ok(frame)))
                    }
                    Poll::Ready(Some(Err(error))) => {
                        *rest = None;
                        commit.set_end(StreamEnd::Interrupted);
                        let error = StreamInterrupted::new(commit.bytes_forwarded(), error.into());
                        Poll::Ready(Some(Err(Box::new(error))))
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Passthrough { inner } => inner.is_end_stream(),
            Kind::Guarded {
                held,
                trailers,
                rest,
                ..
            } => {
                held.is_empty()
                    && trailers.is_none()
                    && rest.as_ref().is_none_or(|b| b.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Passthrough { inner } => inner.size_hint(),
            Kind::Guarded { held, rest, .. } => {
                let held: u64 = held.iter().map(|c| c.len() as u64).sum();
                held_then(held, rest.as_ref().map(|b| b.size_hint()))
            }
        }
    }
}
