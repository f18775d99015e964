//! The decision: classification + server hint + backoff + bounds.
//!
//! The policy's judgement is pure: given the request's `RetryState` and
//! an attempt's outcome, it says whether to accept the outcome, stop, or
//! retry after a given delay. [`RetryLayer`](crate::RetryLayer) drives it;
//! it also implements [`tower::retry::Policy`] so tower's own retry layer
//! can use it (classifying on status and headers only, since tower's policy
//! cannot read a response body).

mod builder;
mod env;
mod judge;
mod known;
mod recovery;
mod state;

#[cfg(test)]
mod settings_tests;

pub use crate::recover::OverflowCut;
pub use crate::report::RecoveryAction;
pub(crate) use crate::report::{Rejection, RejectionKind};
pub use builder::RetryPolicyBuilder;
pub(crate) use judge::{Decision, Outcome};
pub(crate) use recovery::{CredentialsFuture, Fallback, Recovery};
pub use recovery::{FallbackMode, RefreshCredentials};
pub(crate) use state::RetryState;

use crate::backoff::Backoff;
use crate::budget::Limits;
use rand::rngs::SmallRng;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// A source of wall-clock time, for `Retry-After` HTTP-dates and RFC 3339 resets.
pub(crate) type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Default cap on the error body read to classify a failed response.
pub(crate) const DEFAULT_ERROR_BODY_PEEK: usize = 64 * 1024;

/// How failed attempts are retried. Cheap to clone; clones share the RNG.
///
/// ```
/// use llm_retry::RetryPolicy;
/// use std::time::Duration;
///
/// let policy = RetryPolicy::builder()
///     .max_retries(5)
///     .max_elapsed(Duration::from_secs(60))
///     .build()
///     .expect("valid policy");
/// assert_eq!(policy.max_retries(), 5);
/// ```
#[derive(Clone)]
pub struct RetryPolicy {
    config: Arc<Config>,
    hooks: crate::hooks::SharedHooks,
}

struct Config {
    backoff: Backoff,
    limits: Limits,
    max_replay_body: usize,
    error_body_peek: usize,
    rng: Mutex<SmallRng>,
    clock: WallClock,
    recovery: RecoveryConfig,
    budget: Option<crate::budget::RetryBudget>,
    /// Error types read by their own classification.
    known_errors: Vec<crate::classify::Recognise>,
    /// The header naming each attempt's number of retries before it.
    attempt_header: Option<http::HeaderName>,
}

/// What the policy may change about a request instead of repeating it.
#[derive(Clone)]
struct RecoveryConfig {
    overflow_cut: Option<crate::recover::OverflowCut>,
    fallback: Option<Fallback>,
    max_consecutive_overloads: u32,
    credentials: Option<Arc<dyn RefreshCredentials>>,
    behind_gateway: bool,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            overflow_cut: Some(crate::recover::OverflowCut::default()),
            fallback: None,
            max_consecutive_overloads: DEFAULT_MAX_CONSECUTIVE_OVERLOADS,
            credentials: None,
            behind_gateway: false,
        }
    }
}

/// Default number of overloads in a row after which the fallback applies
/// (or, without a fallback, the request gives up).
pub(crate) const DEFAULT_MAX_CONSECUTIVE_OVERLOADS: u32 = 3;

impl RetryPolicy {
    /// Starts a builder with the defaults.
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder::default()
    }

    /// The same policy calling `hooks` on every retry, recovery and
    /// give-up, on whichever path drives it ([`RetryLayer`](crate::RetryLayer)
    /// or `tower::retry`). A policy has one set of hooks: this replaces any
    /// set before (combine several in one [`RetryHooks`](crate::RetryHooks)
    /// type).
    pub fn with_hooks<H: crate::hooks::RetryHooks>(mut self, hooks: H) -> RetryPolicy {
        self.hooks = crate::hooks::SharedHooks(Arc::new(hooks));
        self
    }

    pub(crate) fn hooks(&self) -> &dyn crate::hooks::RetryHooks {
        &*self.hooks.0
    }

    /// The backoff used when the server names no wait.
    pub(crate) fn backoff(&self) -> &Backoff {
        &self.config.backoff
    }

    /// A number in [0, 1) from the policy's generator (seeded by
    /// [`RetryPolicyBuilder::seed`], so runs can be reproduced).
    pub(crate) fn unit_random(&self) -> f64 {
        use rand::Rng;
        let mut rng = self
            .config
            .rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        rng.random::<f64>()
    }

    /// The per-request bounds.
    pub(crate) fn limits(&self) -> &Limits {
        &self.config.limits
    }

    /// Retries after the first attempt.
    pub fn max_retries(&self) -> u32 {
        self.config.limits.max_retries
    }

    /// Bound on a request's total time, waits included.
    pub fn max_elapsed(&self) -> std::time::Duration {
        self.config.limits.max_elapsed
    }

    /// Longest server-named wait honoured.
    pub fn max_server_wait(&self) -> std::time::Duration {
        self.config.limits.max_server_wait
    }

    /// Longest time one attempt may take to its response head, if bounded
    /// by more than the deadline.
    pub fn attempt_timeout(&self) -> Option<std::time::Duration> {
        self.config.limits.attempt_timeout
    }

    /// The request-body replay cap in bytes.
    pub fn max_replay_body(&self) -> usize {
        self.config.max_replay_body
    }

    /// How many bytes of a failed response's body are read to classify it.
    pub fn error_body_peek(&self) -> usize {
        self.config.error_body_peek
    }

    /// The credential hook, if one is configured.
    pub fn credentials(&self) -> Option<&Arc<dyn RefreshCredentials>> {
        self.config.recovery.credentials.as_ref()
    }

    /// The header naming each attempt's retry count, if one is configured.
    pub fn attempt_header(&self) -> Option<&http::HeaderName> {
        self.config.attempt_header.as_ref()
    }

    /// The shared retry budget, if one is configured.
    pub fn budget(&self) -> Option<&crate::budget::RetryBudget> {
        self.config.budget.as_ref()
    }

    /// The fallback model, if one is configured.
    #[cfg(test)]
    pub(crate) fn fallback(&self) -> Option<&Fallback> {
        self.config.recovery.fallback.as_ref()
    }

    /// Overloads in a row before the fallback applies or the request gives up.
    pub fn max_consecutive_overloads(&self) -> u32 {
        self.config.recovery.max_consecutive_overloads
    }

    /// Whether the policy leaves rate limits, overloads and 5xx to a gateway.
    pub fn behind_gateway(&self) -> bool {
        self.config.recovery.behind_gateway
    }

    /// Asks the shared budget (if any) for a resend after `delay`: a place
    /// among the waiting retries first (when there is a wait), then a
    /// withdrawal, so a refused withdrawal costs nothing. Both retry paths
    /// spend through here.
    pub(crate) fn spend_budget(
        &self,
        delay: std::time::Duration,
    ) -> Result<Option<crate::budget::WaitPermit>, crate::report::StopReason> {
        use crate::report::StopReason;
        let Some(budget) = self.budget() else {
            return Ok(None);
        };
        let permit = if delay.is_zero() {
            None
        } else {
            let permit = budget
                .try_admit_wait()
                .map_err(|full| StopReason::AdmissionFull {
                    max_waiting: full.max_waiting(),
                })?;
            Some(permit)
        };
        let withdrawn = budget.withdraw();
        crate::observe::budget_available(budget.level().available, budget.name());
        withdrawn.map_err(|exhausted| StopReason::BudgetExhausted {
            reason: exhausted.to_string(),
        })?;
        Ok(permit)
    }

    fn now(&self) -> SystemTime {
        (self.config.clock)()
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicyBuilder::default()
            .build()
            .unwrap_or_else(|_| unreachable!("the default configuration is valid"))
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("backoff", &self.config.backoff)
            .field("limits", &self.config.limits)
            .field("max_replay_body", &self.config.max_replay_body)
            .field("error_body_peek", &self.config.error_body_peek)
            .field("overflow_cut", &self.config.recovery.overflow_cut)
            .field("fallback", &self.config.recovery.fallback)
            .field(
                "max_consecutive_overloads",
                &self.config.recovery.max_consecutive_overloads,
            )
            .field(
                "refreshes_credentials",
                &self.config.recovery.credentials.is_some(),
            )
            .field("behind_gateway", &self.config.recovery.behind_gateway)
            .finish_non_exhaustive()
    }
}
