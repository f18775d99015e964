//! [`RetryBody`]: the final response's body.

use crate::held::Held;
use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// The body of a response returned by [`Retry`](super::Retry).
    ///
    /// A successful response's body passes straight through. A failed
    /// response whose start was read to classify it yields those bytes
    /// first, unchanged, then the rest.
    pub struct RetryBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Passthrough { #[pin] inner: B },
        Peeked { held: Held<B> },
    }
}

impl<B> RetryBody<B> {
    pub(super) fn passthrough(inner: B) -> RetryBody<B> {
        RetryBody {
            kind: Kind::Passthrough { inner },
        }
    }

    /// `prefix` was read from the body already; `rest` is `None` when the body ended.
    pub(super) fn peeked(
        prefix: Bytes,
        trailers: Option<HeaderMap>,
        rest: Option<Pin<Box<B>>>,
    ) -> RetryBody<B>
    where
        B: Body<Data = Bytes>,
    {
        let chunks = (!prefix.is_empty()).then_some(prefix).into_iter().collect();
        RetryBody {
            kind: Kind::Peeked {
                held: Held::new(chunks, trailers, rest),
            },
        }
    }
}

impl<B> RetryBody<B> {
    /// The inner body, when the layer read none of it: a response that
    /// passes straight through. A body whose start was read to classify it
    /// comes back as it is, to be read through.
    #[allow(
        clippy::result_large_err,
        reason = "the body itself comes back, as large as it was"
    )]
    pub fn into_inner(self) -> Result<B, RetryBody<B>> {
        match self.kind {
            Kind::Passthrough { inner } => Ok(inner),
            kind @ Kind::Peeked { .. } => Err(RetryBody { kind }),
        }
    }
}

impl<B> std::fmt::Debug for RetryBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Passthrough { .. } => "passthrough",
            Kind::Peeked { .. } => "peeked",
        };
        f.debug_struct("RetryBody").field("kind", &kind).finish()
    }
}

impl<B> Body for RetryBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Passthrough { inner } => inner.poll_frame(cx),
            KindProj::Peeked { held } => held.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Passthrough { inner } => inner.is_end_stream(),
            Kind::Peeked { held } => held.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Passthrough { inner } => inner.size_hint(),
            Kind::Peeked { held } => held.size_hint(),
        }
    }
}
