//! [`GuardedBody`]: the held prefix, then the rest, counted.

use super::error::StreamInterrupted;
use super::{StreamCommit, StreamEnd};
use crate::error::BoxError;
use crate::held::Held;
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
        Guarded { held: Held<B>, end: EndOnDrop },
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
    ) -> GuardedBody<B>
    where
        B: Body<Data = Bytes>,
    {
        let held = Held::new(held, trailers, Some(rest));
        GuardedBody {
            kind: Kind::Guarded {
                held,
                end: EndOnDrop(commit),
            },
        }
    }
}

impl<B> GuardedBody<B> {
    /// The inner body, when the guard did not watch it (an unguarded
    /// response passes straight through). A guarded stream comes back as
    /// it is: only it counts what reaches the caller.
    #[allow(
        clippy::result_large_err,
        reason = "the body itself comes back, as large as it was"
    )]
    pub fn into_inner(self) -> Result<B, GuardedBody<B>> {
        match self.kind {
            Kind::Passthrough { inner } => Ok(inner),
            kind @ Kind::Guarded { .. } => Err(GuardedBody { kind }),
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
            KindProj::Guarded { held, end } => {
                let commit = &end.0;
                match held.poll_frame(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(None) => {
                        commit.set_end(StreamEnd::Completed);
                        Poll::Ready(None)
                    }
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(data) = frame.data_ref() {
                            commit.add_forwarded(data.len());
                        }
                        // Callers stop polling once a body reports its end:
                        // a stream read to its last frame is complete now,
                        // not dropped later.
                        if held.is_end_stream() {
                            commit.set_end(StreamEnd::Completed);
                        }
                        Poll::Ready(Some(Ok(frame)))
                    }
                    Poll::Ready(Some(Err(error))) => {
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
            Kind::Guarded { held, .. } => held.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Passthrough { inner } => inner.size_hint(),
            Kind::Guarded { held, .. } => held.size_hint(),
        }
    }
}
