//! [`RetryLayer`]: configuration only.

use super::Retry;
use crate::hooks::RetryHooks;
use crate::policy::RetryPolicy;
use tower::Layer;

/// Wraps a service so that failed LLM API calls are retried by a [`RetryPolicy`].
///
/// ```no_run
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use llm_retry::{ReplayBody, RetryLayer, RetryPolicy};
/// use tower::{Service, ServiceBuilder, ServiceExt};
///
/// # async fn run<C>(client: C) -> Result<(), llm_retry::BoxError>
/// # where
/// #     C: Service<http::Request<ReplayBody<Full<Bytes>>>, Response = http::Response<Full<Bytes>>> + Clone,
/// #     C::Error: Into<llm_retry::BoxError>,
/// # {
/// let mut svc = ServiceBuilder::new()
///     .layer(RetryLayer::new(RetryPolicy::default()))
///     .service(client);
/// let request = http::Request::post("http://127.0.0.1:8080/v1/messages")
///     .body(Full::new(Bytes::from_static(b"{}")))?;
/// let response = svc.ready().await?.call(request).await?;
/// let report = response.extensions().get::<llm_retry::RetryReport>();
/// println!("{:?}", report.map(|r| r.attempts));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct RetryLayer {
    policy: RetryPolicy,
}

impl RetryLayer {
    /// A layer retrying by `policy`.
    pub fn new(policy: RetryPolicy) -> RetryLayer {
        RetryLayer { policy }
    }

    /// Calls `hooks` on every retry, recovery and give-up: the same as
    /// setting them on this layer's policy with
    /// [`RetryPolicy::with_hooks`], replacing any set there before.
    pub fn with_hooks<H: RetryHooks>(mut self, hooks: H) -> RetryLayer {
        self.policy = self.policy.with_hooks(hooks);
        self
    }

    /// The policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Retry<S> {
        Retry::new(inner, self.policy.clone())
    }
}
