//! [`RetryLayer`]: configuration only.

use super::carry::Carriage;
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
    /// Its services start settled on no gate below them.
    no_gate_below: bool,
}

impl RetryLayer {
    /// A layer retrying by `policy`.
    pub fn new(policy: RetryPolicy) -> RetryLayer {
        RetryLayer {
            policy,
            no_gate_below: false,
        }
    }

    /// Says that no rate-limit gate ([`RateLimitLayer`](crate::rate_limit::RateLimitLayer))
    /// sits below this layer's services: their requests neither carry a
    /// link for one nor read the body ahead for its key, from the first.
    ///
    /// A service learns this on its own from its first request, which
    /// carries the link in its extensions to find out; a stack made anew
    /// for every request (a client middleware's, whose inner service
    /// borrows the call) would pay for that at every request. A gate
    /// below all the same gets the first attempt of each new service's
    /// first request without the link (it neither knows the request's
    /// bounds nor hears its answer); the service's later requests carry it.
    pub fn no_gate_below(mut self) -> RetryLayer {
        self.no_gate_below = true;
        self
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
        let carriage = if self.no_gate_below {
            Carriage::no_gate()
        } else {
            Carriage::default()
        };
        Retry::new(inner, self.policy.clone(), carriage)
    }
}
