//! [`ClientLayer`]: the recommended client-side stack as one layer.

use crate::hooks::RetryHooks;
use crate::policy::RetryPolicy;
use crate::rate_limit::{RateLimit, RateLimitLayer};
use crate::retry::{Retry, RetryLayer};
use crate::stream_guard::{StreamGuard, StreamGuardLayer};
use tower::Layer;

/// The service a [`ClientLayer`] builds: retries, over the shared
/// rate-limit gate, over the stream guard, over your client.
pub type ClientStack<S> = Retry<RateLimit<StreamGuard<S>>>;

/// Everything a client of an LLM API should have, in one layer:
///
/// 1. [`RetryLayer`] with its policy — by default [`RetryPolicy::default()`],
///    which carries a shared [`RetryBudget`](crate::budget::RetryBudget):
///    retries may add 20 % to recent first sends, plus 10 a second. A rate
///    limit's retry (a 429, or a stream's `rate_limit_error` first event)
///    is not charged to it: it waits in the gate below, which sends
///    no faster than the key was found to admit;
/// 2. a [`RateLimitLayer`] shared by every clone — by default
///    [`RateLimitLayer::learned()`]: when a 429 names a wait, every request
///    to that key waits it out in arrival order, and the key's send rate
///    is learned from its 429s, so a crowd of requests settles just below
///    the provider's limit instead of each one discovering it alone;
/// 3. a [`StreamGuardLayer`]: a streamed answer that fails before its first
///    content is retried; one that fails after is never replayed.
///
/// Build it once per client (or per upstream) and clone it: clones share
/// the budget and the gate, which is the point. Each part can be replaced;
/// the parts stay usable on their own.
///
/// ```no_run
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use hyper_util::{client::legacy::Client, rt::TokioExecutor};
/// use llm_retry::ClientLayer;
/// use tower::{ServiceBuilder, ServiceExt};
///
/// # async fn run() -> Result<(), llm_retry::BoxError> {
/// let service = ServiceBuilder::new()
///     .layer(ClientLayer::default())
///     .service(Client::builder(TokioExecutor::new()).build_http());
/// let request = http::Request::post("https://api.anthropic.com/v1/messages")
///     .body(Full::new(Bytes::from_static(b"{}")))?;
/// let response = service.oneshot(request).await?;
/// # let _ = response;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ClientLayer {
    retry: RetryLayer,
    rate_limit: RateLimitLayer,
    stream_guard: StreamGuardLayer,
}

impl Default for ClientLayer {
    /// [`ClientLayer::new`] with [`RetryPolicy::default()`].
    fn default() -> Self {
        ClientLayer::new(RetryPolicy::default())
    }
}

impl ClientLayer {
    /// The stack retrying by `policy`, with a learning gate and the
    /// default stream guard.
    pub fn new(policy: RetryPolicy) -> ClientLayer {
        ClientLayer {
            retry: RetryLayer::new(policy),
            rate_limit: RateLimitLayer::learned(),
            stream_guard: StreamGuardLayer::new(),
        }
    }

    /// Calls `hooks` on every retry, recovery and give-up, replacing any
    /// set on the policy before ([`RetryPolicy::with_hooks`]).
    pub fn with_hooks<H: RetryHooks>(mut self, hooks: H) -> ClientLayer {
        self.retry = self.retry.with_hooks(hooks);
        self
    }

    /// Replaces the gate: known quotas, adaptive bounds, or a gate shared
    /// with other stacks (clones of one [`RateLimitLayer`] share its state).
    /// A gate that paces nothing (`RateLimitLayer::new(Quotas::none())`,
    /// holds only) leaves rate-limit retries charged to the retry budget.
    pub fn rate_limit(mut self, rate_limit: RateLimitLayer) -> ClientLayer {
        self.rate_limit = rate_limit;
        self
    }

    /// Replaces the stream guard's configuration.
    pub fn stream_guard(mut self, stream_guard: StreamGuardLayer) -> ClientLayer {
        self.stream_guard = stream_guard;
        self
    }

    /// The retry policy.
    pub fn policy(&self) -> &RetryPolicy {
        self.retry.policy()
    }
}

impl<S> Layer<S> for ClientLayer {
    type Service = ClientStack<S>;

    fn layer(&self, inner: S) -> ClientStack<S> {
        let inner = self.stream_guard.layer(inner);
        let (service, gate) = self.rate_limit.layer_under_retry(inner);
        Retry::over_gate(service, self.retry.policy().clone(), gate)
    }
}
