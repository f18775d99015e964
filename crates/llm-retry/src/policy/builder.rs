//! Building a [`RetryPolicy`], rejecting invalid configuration up front.

use super::{
    Config, Fallback, FallbackMode, RecoveryConfig, RefreshCredentials, RetryPolicy, WallClock,
    DEFAULT_ERROR_BODY_PEEK,
};
use crate::backoff::{Backoff, Jitter};
use crate::budget::Limits;
use crate::budget::RetryBudget;
use crate::classify::{recognise, Recognise, Reported};
use crate::recover::OverflowCut;
use crate::replay::DEFAULT_MAX_REPLAY_BODY;
use crate::ConfigError;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Builds a [`RetryPolicy`]. Every setter has a documented default.
#[must_use]
pub struct RetryPolicyBuilder {
    initial_backoff: Duration,
    max_backoff: Duration,
    jitter: Jitter,
    limits: Limits,
    max_replay_body: usize,
    error_body_peek: usize,
    seed: Option<u64>,
    clock: Option<WallClock>,
    recovery: RecoveryConfig,
    budget: Option<RetryBudget>,
    known_errors: Vec<Recognise>,
    attempt_header: Option<http::HeaderName>,
}

impl Default for RetryPolicyBuilder {
    fn default() -> Self {
        let backoff = Backoff::default();
        RetryPolicyBuilder {
            initial_backoff: backoff.initial(),
            max_backoff: backoff.max(),
            jitter: backoff.jitter(),
            limits: Limits::default(),
            max_replay_body: DEFAULT_MAX_REPLAY_BODY,
            error_body_peek: DEFAULT_ERROR_BODY_PEEK,
            seed: None,
            clock: None,
            recovery: RecoveryConfig::default(),
            budget: Some(RetryBudget::default()),
            known_errors: super::known::LAYER_ERRORS.to_vec(),
            attempt_header: None,
        }
    }
}

impl fmt::Debug for RetryPolicyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicyBuilder")
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("jitter", &self.jitter)
            .field("limits", &self.limits)
            .field("max_replay_body", &self.max_replay_body)
            .field("seed", &self.seed)
            .field("fallback", &self.recovery.fallback)
            .field("behind_gateway", &self.recovery.behind_gateway)
            .finish_non_exhaustive()
    }
}

impl RetryPolicyBuilder {
    /// Retries after the first attempt (default 10).
    pub fn max_retries(mut self, n: u32) -> Self {
        self.limits.max_retries = n;
        self
    }

    /// Bound on a request's total time, waits included (default 300 s). A
    /// wait or resend that would end past it is not started, and nothing
    /// outlives it: an attempt still waiting for its response head, a
    /// failed response's body being read, a credential refresh. A streamed
    /// body already handed to the caller is never cut by it.
    pub fn max_elapsed(mut self, d: Duration) -> Self {
        self.limits.max_elapsed = d;
        self
    }

    /// Longest time one attempt may take to its response head (default: no
    /// bound but the deadline). An attempt cut by it counts as a timeout
    /// and is retried as one. Under a
    /// [`StreamGuardLayer`](crate::stream_guard::StreamGuardLayer) a
    /// streamed answer's head is handed over with its first content, so
    /// there the bound is a time to first token: give slow-starting models
    /// room. Under a rate-limit gate it is timed from the
    /// send, not from the time the send queued in the gate. On the
    /// `tower::retry` path it applies only through a gate, from the second
    /// attempt on.
    pub fn attempt_timeout(mut self, d: Duration) -> Self {
        self.limits.attempt_timeout = Some(d);
        self
    }

    /// Longest server-named wait honoured (default 120 s); a longer demand
    /// ends the request at once.
    pub fn max_server_wait(mut self, d: Duration) -> Self {
        self.limits.max_server_wait = d;
        self
    }

    /// First computed backoff step (default 500 ms).
    pub fn initial_backoff(mut self, d: Duration) -> Self {
        self.initial_backoff = d;
        self
    }

    /// Largest computed backoff step before jitter (default 32 s).
    pub fn max_backoff(mut self, d: Duration) -> Self {
        self.max_backoff = d;
        self
    }

    /// Jitter on computed steps (default +0–25 %).
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Request-body replay cap in bytes (default 16 MiB). A larger body is
    /// still sent once; it is just not retried.
    pub fn max_replay_body(mut self, bytes: usize) -> Self {
        self.max_replay_body = bytes;
        self
    }

    /// Bytes of a failed response's body read to classify it (default 64 KiB).
    pub fn error_body_peek(mut self, bytes: usize) -> Self {
        self.error_body_peek = bytes;
        self
    }

    /// Seeds the jitter RNG, making delays reproducible (default: from the OS).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The wall clock used for HTTP-date and RFC 3339 hints (default `SystemTime::now`).
    pub fn wall_clock<F>(mut self, clock: F) -> Self
    where
        F: Fn() -> SystemTime + Send + Sync + 'static,
    {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// How `max_tokens` is cut after a context overflow (default: floor
    /// 3000, margin 1000); `None` turns the recovery off.
    pub fn context_overflow_cut(mut self, cut: Option<OverflowCut>) -> Self {
        self.recovery.overflow_cut = cut;
        self
    }

    /// Switches to `model` after repeated overloads, automatically or by
    /// ending with a `FallbackTriggered` error (default: no fallback).
    pub fn fallback_model(mut self, model: impl Into<String>, mode: FallbackMode) -> Self {
        self.recovery.fallback = Some(Fallback {
            model: model.into(),
            mode,
        });
        self
    }

    /// Overloads in a row before the fallback applies or, without one, the
    /// request gives up (default 3; 0 never counts).
    pub fn max_consecutive_overloads(mut self, n: u32) -> Self {
        self.recovery.max_consecutive_overloads = n;
        self
    }

    /// Refreshes credentials once after a 401 (default: a 401 is final).
    pub fn refresh_credentials<R: RefreshCredentials>(mut self, hook: R) -> Self {
        self.recovery.credentials = Some(Arc::new(hook));
        self
    }

    /// Names each attempt's retry count in the header `name`: `0` on the
    /// first send, `1` on the first resend, and so on (off by default). The
    /// official SDKs send `x-stainless-retry-count` this way; a gateway can
    /// read it to leave a request that is already being retried alone.
    ///
    /// ```
    /// use http::HeaderName;
    /// let policy = llm_retry::RetryPolicy::builder()
    ///     .attempt_header(HeaderName::from_static("x-stainless-retry-count"))
    ///     .build()?;
    /// # let _ = policy;
    /// # Ok::<(), llm_retry::ConfigError>(())
    /// ```
    pub fn attempt_header(mut self, name: http::HeaderName) -> Self {
        self.attempt_header = Some(name);
        self
    }

    /// Leaves 429, 529 and 5xx (as statuses or as a stream's first event)
    /// to a gateway that manages backpressure: they are retried only when
    /// the answer says `x-should-retry: true` (default off). 408, 409 and
    /// transport failures are still retried.
    pub fn behind_gateway(mut self, on: bool) -> Self {
        self.recovery.behind_gateway = on;
        self
    }

    /// Shares `budget` with every request of this policy: each first send
    /// deposits, each resend withdraws, and waiting retries are admitted up to
    /// the budget's limit. Clone one budget into several policies to share
    /// it across clients.
    ///
    /// Default: a fresh [`RetryBudget::default()`] (retries may add 20 % to
    /// the first sends of the last 10 s, plus 10 a second), shared by every
    /// clone of the built policy and every request through a layer built
    /// from it — so a crowd of requests cannot turn an outage into a retry
    /// storm. [`no_budget`](Self::no_budget) turns it off.
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// No shared budget: each request is bounded only by its own limits
    /// (retries, deadline). For a single caller whose few requests must each
    /// try their utmost; a crowd of requests should keep a budget.
    pub fn no_budget(mut self) -> Self {
        self.budget = None;
        self
    }

    /// Reads errors of type `T` on an attempt's error chain by their own
    /// [`Reported`] classification, as the library's layer errors are read:
    /// for a layer of yours under the retry layer that fails attempts with
    /// its own error type.
    pub fn recognise<T: Reported>(mut self) -> Self {
        self.known_errors.push(recognise::<T>);
        self
    }

    /// Validates the configuration.
    pub fn build(self) -> Result<RetryPolicy, ConfigError> {
        if self.max_backoff < self.initial_backoff {
            return Err(refused(
                "max_backoff",
                format!(
                    "{:?} is shorter than initial_backoff ({:?})",
                    self.max_backoff, self.initial_backoff
                ),
            ));
        }
        if let Jitter::Proportional { fraction } = self.jitter {
            if !(0.0..=1.0).contains(&fraction) {
                return Err(refused(
                    "jitter",
                    format!("fraction {fraction} is outside [0, 1]"),
                ));
            }
        }
        if let Some(fallback) = &self.recovery.fallback {
            if fallback.model.trim().is_empty() {
                return Err(refused("fallback_model", "the model name is empty".into()));
            }
        }
        if let Some(cut) = self.recovery.overflow_cut {
            if cut.floor == 0 {
                return Err(refused(
                    "context_overflow_cut",
                    "the floor must be positive".into(),
                ));
            }
        }
        if self.limits.max_elapsed.is_zero() {
            return Err(refused("max_elapsed", "must be positive".into()));
        }
        if self.limits.attempt_timeout.is_some_and(|d| d.is_zero()) {
            return Err(refused("attempt_timeout", "must be positive".into()));
        }
        let rng = match self.seed {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => SmallRng::from_os_rng(),
        };
        Ok(RetryPolicy {
            hooks: crate::hooks::SharedHooks::default(),
            config: Arc::new(Config {
                backoff: Backoff::new(self.initial_backoff, self.max_backoff, self.jitter),
                limits: self.limits,
                max_replay_body: self.max_replay_body,
                error_body_peek: self.error_body_peek,
                rng: Mutex::new(rng),
                clock: self.clock.unwrap_or_else(|| Arc::new(SystemTime::now)),
                recovery: self.recovery,
                budget: self.budget,
                known_errors: self.known_errors,
                attempt_header: self.attempt_header,
            }),
        })
    }
}

/// A refused [`RetryPolicyBuilder`] setting.
fn refused(setting: &'static str, problem: String) -> ConfigError {
    ConfigError::new("retry policy", setting, problem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverted_backoff_bounds_are_rejected() {
        let err = RetryPolicy::builder()
            .initial_backoff(Duration::from_secs(10))
            .max_backoff(Duration::from_secs(1))
            .build()
            .expect_err("must reject");
        assert!(err.to_string().contains("max_backoff"), "{err}");
        let fixed = RetryPolicy::builder()
            .initial_backoff(Duration::from_secs(1))
            .max_backoff(Duration::from_secs(1))
            .build();
        assert!(fixed.is_ok(), "equal bounds make a fixed backoff");
    }

    #[test]
    fn out_of_range_jitter_and_zero_deadline_are_rejected() {
        let jitter = Jitter::Proportional { fraction: 2.0 };
        assert!(RetryPolicy::builder().jitter(jitter).build().is_err());
        assert!(RetryPolicy::builder()
            .max_elapsed(Duration::ZERO)
            .build()
            .is_err());
    }

    #[test]
    fn defaults_match_the_documented_values() {
        let p = RetryPolicy::default();
        assert_eq!(p.limits().max_retries, 10);
        assert_eq!(p.limits().max_server_wait, Duration::from_secs(120));
        assert_eq!(p.limits().max_elapsed, Duration::from_secs(300));
        assert_eq!(p.max_replay_body(), 16 * 1024 * 1024);
        assert_eq!(p.backoff().base(1), Duration::from_millis(500));
    }
}
