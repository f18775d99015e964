//! [`FailoverBuilder`]: the bounds of a failover, validated once.

use super::service::Failover;
use super::shutdown::Shutdown;
use super::target::Target;
use crate::config_error::ConfigError;
use crate::policy::RetryPolicy;
use bytes::Bytes;
use http::request::Parts;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

/// Longest wait between rounds a configuration may allow.
pub(crate) const MAX_ROUND_WAIT: Duration = Duration::from_secs(60);
/// Most further rounds a configuration may allow.
pub(crate) const MAX_ROUNDS: u32 = 3;
/// Default cap on a request body the failover keeps for its attempts.
const DEFAULT_MAX_BODY: usize = 16 << 20;
/// Default bound on requests of one failover waiting for a further round.
const DEFAULT_MAX_WAITING_ROUNDS: usize = 64;
/// The wait before the second round when no provider named one, from the
/// end of the first; it doubles for each round after.
pub(super) const UNNAMED_ROUND_WAIT: Duration = Duration::from_millis(500);
/// The longest a target is skipped by the requests for a model after its
/// provider named a wait: a bogus or huge one must not sideline it for hours.
pub(super) const MAX_COOLDOWN: Duration = Duration::from_secs(60);

/// Decides whether a request is bound to provider state held by the first
/// target (a provider-side conversation, a stored response): such a request
/// never changes targets.
pub(super) type StateBound = Arc<dyn Fn(&Parts, &Bytes) -> bool + Send + Sync>;

/// A further round after every target turned a request away: opt-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExhaustionRetry {
    /// Further rounds allowed (1 to 3).
    pub max_rounds: u32,
    /// The longest provider-named wait a further round waits out (up to
    /// 60 s): when the soonest one is longer, no round
    /// begins. Jitter adds up to a fifth of the wait (at least 50 ms) on
    /// top, so waiters do not wake together.
    pub max_wait: Duration,
}

impl ExhaustionRetry {
    /// Up to `max_rounds` further rounds, each after a provider-named wait
    /// of at most `max_wait`.
    pub fn new(max_rounds: u32, max_wait: Duration) -> ExhaustionRetry {
        ExhaustionRetry {
            max_rounds,
            max_wait,
        }
    }
}

/// The validated settings every request of a failover shares.
pub(super) struct Config {
    pub(super) max_target_attempts: usize,
    pub(super) max_upstream_sends: u32,
    pub(super) exhaustion_retry: Option<ExhaustionRetry>,
    pub(super) deadline: Option<Duration>,
    pub(super) max_body: usize,
    pub(super) state_bound: Option<StateBound>,
    pub(super) policy: RetryPolicy,
    pub(super) max_waiting_rounds: usize,
    pub(super) waiting_rounds: AtomicUsize,
    pub(super) shutdown: Shutdown,
}

/// Builds a [`Failover`]. Every bound has a default; [`build`](Self::build)
/// refuses unsafe or contradictory ones, naming the setting.
#[must_use]
pub struct FailoverBuilder<S> {
    targets: Vec<Target<S>>,
    max_target_attempts: Option<usize>,
    max_upstream_sends: Option<u32>,
    exhaustion_retry: Option<ExhaustionRetry>,
    deadline: Option<Duration>,
    max_body: usize,
    state_bound: Option<StateBound>,
    policy: RetryPolicy,
    max_waiting_rounds: usize,
    shutdown: Shutdown,
}

impl<S> std::fmt::Debug for FailoverBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailoverBuilder")
            .field("targets", &self.targets)
            .field("max_target_attempts", &self.max_target_attempts)
            .field("max_upstream_sends", &self.max_upstream_sends)
            .field("exhaustion_retry", &self.exhaustion_retry)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl<S> FailoverBuilder<S> {
    pub(super) fn new(targets: Vec<Target<S>>) -> FailoverBuilder<S> {
        FailoverBuilder {
            targets,
            max_target_attempts: None,
            max_upstream_sends: None,
            exhaustion_retry: None,
            deadline: None,
            max_body: DEFAULT_MAX_BODY,
            state_bound: None,
            policy: RetryPolicy::default(),
            max_waiting_rounds: DEFAULT_MAX_WAITING_ROUNDS,
            shutdown: Shutdown::new(),
        }
    }

    /// Targets tried per round at most (default: every target).
    pub fn max_target_attempts(mut self, n: usize) -> Self {
        self.max_target_attempts = Some(n);
        self
    }

    /// Upstream sends per request at most, over every target and round
    /// (default: each target's `max_sends`, summed over one round, times
    /// the rounds allowed).
    pub fn max_upstream_sends(mut self, n: u32) -> Self {
        self.max_upstream_sends = Some(n);
        self
    }

    /// Allows further rounds after every target turned a request away
    /// before executing it. Without it a request makes one pass.
    pub fn exhaustion_retry(mut self, retry: ExhaustionRetry) -> Self {
        self.exhaustion_retry = Some(retry);
        self
    }

    /// Ends every request that has not been answered `deadline` after it
    /// arrived: no attempt, wait or round outlives it.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The largest request body kept for the attempts (default 16 MiB).
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Requests for which `bound` is true are bound to provider state held
    /// by the first target: they never go to another target.
    pub fn state_bound<F>(mut self, bound: F) -> Self
    where
        F: Fn(&Parts, &Bytes) -> bool + Send + Sync + 'static,
    {
        self.state_bound = Some(Arc::new(bound));
        self
    }

    /// The policy that judges each target's outcome (default
    /// [`RetryPolicy::default()`]); only its classification and reading of
    /// waits are used, never its retries.
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Requests of this failover that may wait for a further round at once
    /// (default 64): past it, an exhausted request returns at once.
    pub fn max_waiting_rounds(mut self, n: usize) -> Self {
        self.max_waiting_rounds = n;
        self
    }

    /// The shutdown signal the failover obeys.
    pub fn shutdown(mut self, shutdown: Shutdown) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// Validates the settings.
    pub fn build(self) -> Result<Failover<S>, ConfigError> {
        let refused =
            |setting: &str, problem: String| Err(ConfigError::new("failover", setting, problem));
        if self.targets.is_empty() {
            return refused("targets", "at least one target is needed".to_owned());
        }
        let mut names: Vec<&str> = self.targets.iter().map(Target::name).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return refused("targets", format!("the name {:?} is used twice", pair[0]));
        }
        let max_target_attempts = self.max_target_attempts.unwrap_or(self.targets.len());
        if max_target_attempts == 0 || max_target_attempts > self.targets.len() {
            return refused(
                "max_target_attempts",
                format!(
                    "must be 1 to the {} targets, got {max_target_attempts}",
                    self.targets.len()
                ),
            );
        }
        if let Some(target) = self.targets.iter().find(|t| t.max_sends == 0) {
            return refused(
                "max_sends",
                format!("target {:?}: must be at least 1", target.name()),
            );
        }
        if self.max_body == 0 {
            return refused("max_body", "must be more than 0".to_owned());
        }
        let smallest = self.targets.iter().map(|t| t.max_sends).min().unwrap_or(1);
        let summed = self
            .targets
            .iter()
            .take(max_target_attempts)
            .map(|t| t.max_sends)
            .fold(0u32, u32::saturating_add);
        let rounds = 1 + self.exhaustion_retry.map_or(0, |retry| retry.max_rounds);
        let max_upstream_sends = self
            .max_upstream_sends
            .unwrap_or_else(|| summed.saturating_mul(rounds));
        if max_upstream_sends < smallest {
            return refused(
                "max_upstream_sends",
                format!("{max_upstream_sends} is fewer than one attempt of any target may make ({smallest})"),
            );
        }
        if let Some(retry) = &self.exhaustion_retry {
            if retry.max_rounds == 0 || retry.max_rounds > MAX_ROUNDS {
                return refused(
                    "exhaustion_retry.max_rounds",
                    format!("must be 1 to {MAX_ROUNDS}, got {}", retry.max_rounds),
                );
            }
            if retry.max_wait.is_zero() || retry.max_wait > MAX_ROUND_WAIT {
                return refused(
                    "exhaustion_retry.max_wait",
                    format!(
                        "must be more than 0 and at most {MAX_ROUND_WAIT:?}, got {:?}",
                        retry.max_wait
                    ),
                );
            }
            if max_upstream_sends < summed.saturating_add(smallest) {
                return refused(
                    "exhaustion_retry",
                    format!("max_upstream_sends ({max_upstream_sends}) leaves no send for a further round after a full one ({summed})"),
                );
            }
            if self
                .deadline
                .is_some_and(|deadline| deadline <= retry.max_wait)
            {
                return refused(
                    "exhaustion_retry.max_wait",
                    format!(
                        "{:?} is not shorter than the deadline ({:?})",
                        retry.max_wait,
                        self.deadline.unwrap_or_default()
                    ),
                );
            }
        }
        if self.deadline.is_some_and(|d| d.is_zero()) {
            return refused("deadline", "must be more than 0".to_owned());
        }
        let config = Config {
            max_target_attempts,
            max_upstream_sends,
            exhaustion_retry: self.exhaustion_retry,
            deadline: self.deadline,
            max_body: self.max_body,
            state_bound: self.state_bound,
            policy: self.policy,
            max_waiting_rounds: self.max_waiting_rounds,
            waiting_rounds: AtomicUsize::new(0),
            shutdown: self.shutdown,
        };
        Ok(Failover::from_parts(self.targets.into(), Arc::new(config)))
    }
}
