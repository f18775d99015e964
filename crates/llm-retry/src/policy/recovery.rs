//! Recovery decisions: when the next attempt can be changed to succeed
//! (smaller `max_tokens`, fallback model, fresh credentials) instead of
//! merely repeated.

use super::{Decision, RetryPolicy, RetryState};
use crate::budget::Refusal;
use crate::classify::{ContextOverflow, FatalKind};
use crate::error::BoxError;
use crate::recover::overflow_max_tokens;
use crate::report::{RecoveryAction, StopReason};
use http::HeaderMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A change to the next attempt, made before it is sent (without sleeping).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Recovery {
    /// Rewrite the body's output-token limit after a context overflow.
    CutMaxTokens {
        /// The new limit.
        to: u64,
    },
    /// Rewrite the body's `model` after repeated overloads.
    FallbackModel {
        /// The model to switch to.
        model: String,
    },
    /// Ask the [`RefreshCredentials`] hook for new credentials after a 401.
    RefreshCredentials,
}

impl Recovery {
    /// Which kind of recovery this is.
    pub(crate) fn action(&self) -> RecoveryAction {
        match self {
            Recovery::CutMaxTokens { .. } => RecoveryAction::CutMaxTokens,
            Recovery::FallbackModel { .. } => RecoveryAction::FallbackModel,
            Recovery::RefreshCredentials => RecoveryAction::RefreshCredentials,
        }
    }
}

/// What happens after too many overloads in a row.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FallbackMode {
    /// Rewrite the request's `model` and continue.
    Automatic,
    /// End with a `FallbackTriggered` error the caller can act on.
    Manual,
}

/// A fallback model and how to switch to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fallback {
    /// The model to use after repeated overloads.
    pub model: String,
    /// Switch automatically or hand the decision to the caller.
    pub mode: FallbackMode,
}

/// What [`RefreshCredentials::refresh`] returns, as the retry loop holds it.
pub(crate) type CredentialsFuture =
    Pin<Box<dyn Future<Output = Result<HeaderMap, BoxError>> + Send + 'static>>;

/// Supplies fresh credentials after a 401: called at most once per request.
///
/// The returned headers (e.g. `authorization`, `x-api-key`) replace those of
/// the same name on the resent request. Their values are never logged.
pub trait RefreshCredentials: Send + Sync + 'static {
    /// Drops any cached token; called right before [`refresh`](Self::refresh).
    fn clear_token_cache(&self) {}

    /// Fetches new credential headers: the header values that replace
    /// those of the same name on the resent request.
    fn refresh(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<HeaderMap, BoxError>> + Send + 'static>>;
}

impl RetryPolicy {
    /// A context overflow: cut `max_tokens` once, when the numbers allow.
    pub(super) fn on_context_overflow(
        &self,
        state: &RetryState,
        overflow: &ContextOverflow,
        elapsed: Duration,
    ) -> Decision {
        let not_retryable = || {
            Decision::Stop(StopReason::NotRetryable(FatalKind::ContextOverflow(
                *overflow,
            )))
        };
        let Some(cut) = self.config.recovery.overflow_cut else {
            return not_retryable();
        };
        if state.recovered(RecoveryAction::CutMaxTokens) {
            return not_retryable();
        }
        let failed = |reason: String| {
            Decision::Stop(StopReason::RecoveryFailed {
                action: RecoveryAction::CutMaxTokens,
                reason,
            })
        };
        match overflow_max_tokens(overflow, &cut) {
            // The floor can exceed what was asked for; resending more would fail again.
            Ok(to) if overflow.max_tokens.is_some_and(|asked| to >= asked) => failed(format!(
                "the cut would not lower max_tokens below the {} requested",
                overflow.max_tokens.unwrap_or(to)
            )),
            Ok(to) => self.resend_now(state, elapsed, Recovery::CutMaxTokens { to }),
            Err(refused) => failed(refused.to_string()),
        }
    }

    /// A 401: refresh once when a hook is configured.
    pub(super) fn on_unauthorized(&self, state: &RetryState, elapsed: Duration) -> Decision {
        if self.config.recovery.credentials.is_none()
            || state.recovered(RecoveryAction::RefreshCredentials)
        {
            return Decision::Stop(StopReason::NotRetryable(FatalKind::Unauthorized));
        }
        self.resend_now(state, elapsed, Recovery::RefreshCredentials)
    }

    /// Whether this overload ends a streak long enough to act on, and how.
    pub(super) fn on_overload_streak(
        &self,
        state: &RetryState,
        elapsed: Duration,
    ) -> Option<Decision> {
        let limit = self.config.recovery.max_consecutive_overloads;
        let count = state.consecutive_overloads().saturating_add(1);
        if limit == 0 || count < limit {
            return None;
        }
        let decision = match &self.config.recovery.fallback {
            Some(fallback) if !state.recovered(RecoveryAction::FallbackModel) => {
                match fallback.mode {
                    FallbackMode::Automatic => self.resend_now(
                        state,
                        elapsed,
                        Recovery::FallbackModel {
                            model: fallback.model.clone(),
                        },
                    ),
                    FallbackMode::Manual => Decision::Stop(StopReason::FallbackTriggered {
                        model: fallback.model.clone(),
                    }),
                }
            }
            _ => Decision::Stop(StopReason::OverloadedRepeatedly { count }),
        };
        Some(decision)
    }

    /// A recovery resends at once, still inside the attempt and time bounds.
    fn resend_now(&self, state: &RetryState, elapsed: Duration, recovery: Recovery) -> Decision {
        let limits = state.limits(self.limits());
        let admitted = limits
            .admit_retry(state.attempts().max(1))
            .and_then(|()| limits.admit_wait(elapsed, Duration::ZERO));
        match admitted {
            Ok(()) => Decision::Recover(recovery),
            Err(refusal) => Decision::Stop(Refusal::into(refusal)),
        }
    }
}

#[cfg(test)]
#[path = "recovery_tests.rs"]
mod tests;
