//! [`RetryLayer`]: configuration only.

use super::Retry;
use crate::hooks::RetryHooks;
use crate::policy::RetryPolicy;
use tower::Layer;

/// Wraps a service so that failed LLM API calls are retried by a [`RetryPolicy`].
#[derive(Debug, Clone, Default)]
pub struct RetryLayer {
    policy: RetryPolicy,
}

impl RetryLayer {
    /// A layer retrying by `policy`.
    pub fn new(policy: RetryPolicy) -> RetryLayer {
        RetryLayer { policy }
    }

    /// Calls `hooks` on every retry, recovery and give-up.
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
