//! The `tower::retry` baseline the benchmarks compare with.

use http::Request;
use llm_retry::ReplayBody;

/// A `tower::retry` policy that never retries but does what any
/// retry-capable layer must: keep a copy of each request, rebuilt from its
/// parts around a cheap clone of the replayable body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NeverRetry;

impl<B, Res, E> tower::retry::Policy<Request<ReplayBody<B>>, Res, E> for NeverRetry {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        _request: &mut Request<ReplayBody<B>>,
        _result: &mut Result<Res, E>,
    ) -> Option<Self::Future> {
        None
    }

    fn clone_request(
        &mut self,
        request: &Request<ReplayBody<B>>,
    ) -> Option<Request<ReplayBody<B>>> {
        let mut clone = Request::new(request.body().try_clone()?);
        *clone.method_mut() = request.method().clone();
        *clone.uri_mut() = request.uri().clone();
        *clone.version_mut() = request.version();
        *clone.headers_mut() = request.headers().clone();
        *clone.extensions_mut() = request.extensions().clone();
        Some(clone)
    }
}
