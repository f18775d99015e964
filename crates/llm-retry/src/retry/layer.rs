//! [`RetryLayer`]: configuration only.

use super::Retry;
use crate::hooks::{RetryHooks, SharedHooks};
use crate::policy::RetryPolicy;
use std::sync::Arc;
use tower::Layer;

/// Wraps a service so that failed LLM API calls are retried by a [`RetryPolicy`].
#[derive(Debug, Clone, Default)]
pub struct RetryLayer {
    policy: RetryPolicy,
    hooks: SharedHooks,
}

impl RetryLayer {
    /// A layer retrying by `policy`.
    pub fn new(policy: RetryPolicy) -> RetryLayer {
        RetryLayer {
            policy,
            hooks: SharedHooks::default(),
        }
    }

    /// Calls `hooks` on every retry, recovery and give-up.
    pub fn with_hooks<H: RetryHooks>(mut self, hooks: H) -> RetryLayer {
        self.hooks = SharedHooks(Arc::new(hooks));
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
        Retry::new(inner, self.policy.clone(), self.hooks.clone())
    }
}
