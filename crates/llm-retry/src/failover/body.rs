//! [`FailoverBody`]: an upstream's answer streaming through, or a
//! rejection's answer kept in memory.

use crate::error::BoxError;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// The body of a [`Failover`](super::Failover)'s answer: the answering
    /// target's body as it streams, or, for the rejection handed over after
    /// an exhaustion, the start of its body, read before the request moved
    /// on (so no connection is held while it waits).
    pub struct FailoverBody<B> {
        #[pin]
        inner: Inner<B>,
    }
}

pin_project! {
    #[project = InnerProj]
    enum Inner<B> {
        Upstream { #[pin] body: B },
        Kept { #[pin] body: Full<Bytes> },
    }
}

impl<B> FailoverBody<B> {
    pub(super) fn upstream(body: B) -> FailoverBody<B> {
        FailoverBody {
            inner: Inner::Upstream { body },
        }
    }

    pub(super) fn kept(bytes: Bytes) -> FailoverBody<B> {
        FailoverBody {
            inner: Inner::Kept {
                body: Full::new(bytes),
            },
        }
    }

    /// Whether this is a rejection's body kept in memory (the answer of an
    /// exhausted failover) rather than a target's body streaming through.
    pub fn is_kept(&self) -> bool {
        matches!(self.inner, Inner::Kept { .. })
    }
}

impl<B> std::fmt::Debug for FailoverBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.is_kept() { "kept" } else { "upstream" };
        f.debug_struct("FailoverBody").field("kind", &kind).finish()
    }
}

impl<B> Body for FailoverBody<B>
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
        match self.project().inner.project() {
            InnerProj::Upstream { body } => body.poll_frame(cx).map_err(Into::into),
            InnerProj::Kept { body } => body.poll_frame(cx).map_err(|never| match never {}),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Upstream { body } => body.is_end_stream(),
            Inner::Kept { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Upstream { body } => body.size_hint(),
            Inner::Kept { body } => body.size_hint(),
        }
    }
}
