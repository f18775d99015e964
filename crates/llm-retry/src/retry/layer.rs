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
    gate_paced: bool,
}

impl RetryLayer {
    /// A layer retrying by `policy`.
    pub fn new(policy: RetryPolicy) -> RetryLayer {
        RetryLayer {
            policy,
            hooks: SharedHooks::default(),
            gate_paced: false,
        }
    }

    /// Under a rate-limit gate that paces the key (as in
    /// [`ClientLayer`](crate::ClientLayer)), a 429's retry does not draw on
    /// the retry budget: it waits in the gate, which sends no faster than
    /// the rate the key was found to admit, so it cannot amplify the load.
    pub(crate) fn gate_paced(mut self, paced: bool) -> RetryLayer {
        self.gate_paced = paced;
        self
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
        Retry::new(
            inner,
            self.policy.clone(),
            self.hooks.clone(),
            self.gate_paced,
        )
    }
}
