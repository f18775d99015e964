//! [`Failover`]: the tower service.

use super::body::FailoverBody;
use super::config::{Config, FailoverBuilder};
use super::operation::Operation;
use super::target::Target;
use crate::error::BoxError;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::Full;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::Service;

/// Sends each request to an ordered list of targets: the first that does
/// not turn it away answers it. See the [module docs](super).
pub struct Failover<S> {
    targets: Arc<[Target<S>]>,
    pub(super) config: Arc<Config>,
}

impl<S> Clone for Failover<S> {
    fn clone(&self) -> Self {
        Failover {
            targets: Arc::clone(&self.targets),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S> fmt::Debug for Failover<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failover")
            .field("targets", &self.targets)
            .finish_non_exhaustive()
    }
}

impl<S> Failover<S> {
    /// Starts a failover over `targets`, tried in this order.
    pub fn builder(targets: Vec<Target<S>>) -> FailoverBuilder<S> {
        FailoverBuilder::new(targets)
    }

    pub(super) fn from_parts(targets: Arc<[Target<S>]>, config: Arc<Config>) -> Failover<S> {
        Failover { targets, config }
    }

    /// The targets, in order.
    pub fn targets(&self) -> &[Target<S>] {
        &self.targets
    }
}

impl<S, B, ResBody> Service<Request<B>> for Failover<S>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<FailoverBody<ResBody>>;
    type Error = BoxError;
    type Future =
        Pin<Box<dyn Future<Output = Result<Response<FailoverBody<ResBody>>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Each attempt readies its target when it is made.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let operation = Operation::new(Arc::clone(&self.targets), Arc::clone(&self.config));
        Box::pin(operation.run(request))
    }
}
