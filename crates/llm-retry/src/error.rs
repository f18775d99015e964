//! The one error type a retried request can end with.

use crate::report::{RetryReport, StopReason};
use std::error::Error;
use std::fmt;

/// A boxed, thread-safe error: what every service in this crate returns.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// A logical request ended without a response to hand over: the last
/// attempt failed before a complete response arrived and no further attempt
/// was allowed, or the stop needs the caller's action even though a
/// response arrived (a manual fallback: [`is_fallback`](Self::is_fallback)).
///
/// Carries the full [`RetryReport`] and the last attempt's error as its
/// [`source`](Error::source). Its `Display` says only why the loop stopped;
/// the last attempt's own error is the next link of the chain, printed by
/// whoever walks it.
#[derive(Debug)]
pub struct RetryError {
    report: RetryReport,
    source: Option<BoxError>,
}

/// What kind of stop a [`RetryError`] reports: one kind per
/// [`StopReason`], each with its predicate on [`RetryError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Every allowed retry was spent ([`StopReason::RetriesExhausted`]).
    Exhausted,
    /// Overloaded too many times in a row with no fallback model
    /// ([`StopReason::OverloadedRepeatedly`]).
    OverloadedRepeatedly,
    /// The deadline left no room for another wait or attempt
    /// ([`StopReason::DeadlineReached`]).
    Deadline,
    /// The server asked for a longer wait than the policy honours
    /// ([`StopReason::ServerWaitTooLong`]).
    ServerWaitTooLong,
    /// The failure is not one another attempt would fix
    /// ([`StopReason::NotRetryable`]).
    NotRetryable,
    /// Behind a gateway, the failure is the gateway's to retry
    /// ([`StopReason::LeftToGateway`]).
    LeftToGateway,
    /// The inner service failed instead of becoming ready for a resend
    /// ([`StopReason::ServiceFailed`]).
    ServiceFailed,
    /// Repeated overloads: the caller should switch to the fallback model
    /// ([`StopReason::FallbackTriggered`]).
    FallbackTriggered,
    /// A recovery (max_tokens cut, credential refresh) could not be applied
    /// ([`StopReason::RecoveryFailed`]).
    RecoveryFailed,
    /// The shared retry budget refused the resend ([`StopReason::BudgetExhausted`]).
    BudgetExhausted,
    /// Too many retries were already waiting ([`StopReason::AdmissionFull`]).
    AdmissionFull,
    /// The request body outgrew the replay buffer ([`StopReason::BodyNotReplayable`]).
    NotReplayable,
    /// The caller's request body failed while it was sent
    /// ([`StopReason::RequestBodyFailed`]).
    RequestBodyFailed,
}

impl ErrorKind {
    /// The kind of a stop.
    pub fn of(stop: &StopReason) -> ErrorKind {
        match stop {
            StopReason::RetriesExhausted { .. } => ErrorKind::Exhausted,
            StopReason::OverloadedRepeatedly { .. } => ErrorKind::OverloadedRepeatedly,
            StopReason::DeadlineReached { .. } => ErrorKind::Deadline,
            StopReason::ServerWaitTooLong { .. } => ErrorKind::ServerWaitTooLong,
            StopReason::LeftToGateway => ErrorKind::LeftToGateway,
            StopReason::ServiceFailed => ErrorKind::ServiceFailed,
            StopReason::FallbackTriggered { .. } => ErrorKind::FallbackTriggered,
            StopReason::RecoveryFailed { .. } => ErrorKind::RecoveryFailed,
            StopReason::BudgetExhausted { .. } => ErrorKind::BudgetExhausted,
            StopReason::AdmissionFull { .. } => ErrorKind::AdmissionFull,
            StopReason::BodyNotReplayable { .. } => ErrorKind::NotReplayable,
            StopReason::RequestBodyFailed => ErrorKind::RequestBodyFailed,
            // A success always hands over its response; it is never an error.
            StopReason::NotRetryable(_) | StopReason::Succeeded => ErrorKind::NotRetryable,
        }
    }
}

impl RetryError {
    pub(crate) fn new(report: RetryReport, source: Option<BoxError>) -> RetryError {
        RetryError { report, source }
    }

    /// The kind of stop, derived from the report's [`StopReason`].
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::of(&self.report.stop)
    }

    /// The account of every attempt.
    pub fn report(&self) -> &RetryReport {
        &self.report
    }

    /// Whether every allowed retry was spent.
    pub fn is_exhausted(&self) -> bool {
        self.kind() == ErrorKind::Exhausted
    }

    /// Whether overloads in a row ended the loop, with no fallback model.
    pub fn is_overloaded_repeatedly(&self) -> bool {
        self.kind() == ErrorKind::OverloadedRepeatedly
    }

    /// Whether the deadline stopped the loop.
    pub fn is_deadline(&self) -> bool {
        self.kind() == ErrorKind::Deadline
    }

    /// Whether the server asked for a longer wait than the policy honours.
    pub fn is_server_wait_too_long(&self) -> bool {
        self.kind() == ErrorKind::ServerWaitTooLong
    }

    /// Whether the loop stopped on a failure that is not transient.
    pub fn is_not_retryable(&self) -> bool {
        self.kind() == ErrorKind::NotRetryable
    }

    /// Whether the failure was left to the gateway in front of the upstream.
    pub fn is_left_to_gateway(&self) -> bool {
        self.kind() == ErrorKind::LeftToGateway
    }

    /// Whether the inner service failed instead of becoming ready.
    pub fn is_service_failed(&self) -> bool {
        self.kind() == ErrorKind::ServiceFailed
    }

    /// Whether repeated overloads call for the fallback model.
    pub fn is_fallback(&self) -> bool {
        self.kind() == ErrorKind::FallbackTriggered
    }

    /// The fallback model to switch to, when [`is_fallback`](Self::is_fallback).
    pub fn fallback_model(&self) -> Option<&str> {
        match &self.report.stop {
            StopReason::FallbackTriggered { model } => Some(model),
            _ => None,
        }
    }

    /// Whether a recovery could not be applied.
    pub fn is_recovery_failed(&self) -> bool {
        self.kind() == ErrorKind::RecoveryFailed
    }

    /// Whether the shared retry budget refused the resend.
    pub fn is_budget_exhausted(&self) -> bool {
        self.kind() == ErrorKind::BudgetExhausted
    }

    /// Whether too many retries were already waiting.
    pub fn is_admission_full(&self) -> bool {
        self.kind() == ErrorKind::AdmissionFull
    }

    /// Whether the request body outgrew the replay buffer.
    pub fn is_not_replayable(&self) -> bool {
        self.kind() == ErrorKind::NotReplayable
    }

    /// Whether the caller's request body failed while it was sent.
    pub fn is_request_body_failed(&self) -> bool {
        self.kind() == ErrorKind::RequestBodyFailed
    }
}

impl fmt::Display for RetryError {
    /// Only this level: the source is the next link of the chain.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.report, f)
    }
}

impl Error for RetryError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn error(stop: StopReason, source: Option<BoxError>) -> RetryError {
        let mut state = crate::policy::RetryState::new();
        state.record_send();
        RetryError::new(state.report(stop), source)
    }

    #[test]
    fn display_prints_only_its_own_level() {
        let e = error(
            StopReason::RetriesExhausted { max_retries: 0 },
            Some("connection reset by peer".into()),
        );
        let own = e.to_string();
        assert!(!own.contains("connection reset by peer"), "{own}");
        // Walking the chain, as error reporters do, names each thing once.
        let mut chain = vec![own];
        let mut next = e.source();
        while let Some(link) = next {
            chain.push(link.to_string());
            next = link.source();
        }
        let all = chain.join(": ");
        assert_eq!(all.matches("connection reset by peer").count(), 1, "{all}");
    }

    #[test]
    fn every_stop_has_its_own_kind_and_predicate() {
        let stops = [
            StopReason::RetriesExhausted { max_retries: 1 },
            StopReason::OverloadedRepeatedly { count: 3 },
            StopReason::DeadlineReached {
                elapsed: Duration::ZERO,
                wait: Duration::ZERO,
                limit: Duration::ZERO,
            },
            StopReason::ServerWaitTooLong {
                asked: Duration::ZERO,
                limit: Duration::ZERO,
            },
            StopReason::NotRetryable(crate::classify::FatalKind::Unauthorized),
            StopReason::LeftToGateway,
            StopReason::ServiceFailed,
            StopReason::FallbackTriggered { model: "m".into() },
            StopReason::RecoveryFailed {
                action: crate::policy::RecoveryAction::CutMaxTokens,
                reason: String::new(),
            },
            StopReason::BudgetExhausted {
                reason: String::new(),
            },
            StopReason::AdmissionFull { max_waiting: 1 },
            StopReason::BodyNotReplayable { cap: 1 },
            StopReason::RequestBodyFailed,
        ];
        let predicates: [fn(&RetryError) -> bool; 13] = [
            RetryError::is_exhausted,
            RetryError::is_overloaded_repeatedly,
            RetryError::is_deadline,
            RetryError::is_server_wait_too_long,
            RetryError::is_not_retryable,
            RetryError::is_left_to_gateway,
            RetryError::is_service_failed,
            RetryError::is_fallback,
            RetryError::is_recovery_failed,
            RetryError::is_budget_exhausted,
            RetryError::is_admission_full,
            RetryError::is_not_replayable,
            RetryError::is_request_body_failed,
        ];
        let mut kinds = Vec::new();
        for (i, stop) in stops.iter().enumerate() {
            let e = error(stop.clone(), None);
            for (j, is) in predicates.iter().enumerate() {
                assert_eq!(is(&e), i == j, "{stop:?}: predicate {j}");
            }
            assert!(!kinds.contains(&e.kind()), "{stop:?} shares a kind");
            kinds.push(e.kind());
        }
    }
}
