//! [`StreamGuard`]: the service.

use super::future::ResponseFuture;
use super::layer::GuardConfig;
use super::GuardedBody;
use crate::error::BoxError;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::Service;

/// A service whose streamed responses are held back until their first
/// content event. Built by [`StreamGuardLayer`](super::StreamGuardLayer).
#[derive(Debug, Clone)]
pub struct StreamGuard<S> {
    inner: S,
    config: Arc<GuardConfig>,
}

impl<S> StreamGuard<S> {
    pub(super) fn new(inner: S, config: Arc<GuardConfig>) -> StreamGuard<S> {
        StreamGuard { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for StreamGuard<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<GuardedBody<ResBody>>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        ResponseFuture::new(self.inner.call(request), Arc::clone(&self.config))
    }
}
