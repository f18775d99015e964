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
/// [`source`](Error::source).
#[derive(Debug)]
pub struct RetryError {
    kind: ErrorKind,
    report: RetryReport,
    source: Option<BoxError>,
}

/// What kind of stop a [`RetryError`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Every allowed retry was spent.
    Exhausted,
    /// The deadline left no room for another wait.
    Deadline,
    /// The server asked for a longer wait than the policy honours.
    ServerWaitTooLong,
    /// The failure is not one another attempt would fix.
    NotRetryable,
    /// The request body could not be replayed.
    NotReplayable,
    /// Repeated overloads: the caller should switch to the fallback model.
    FallbackTriggered,
    /// A recovery (max_tokens cut, credential refresh) could not be applied.
    RecoveryFailed,
    /// The shared retry budget or its admission limit refused the resend.
    BudgetExhausted,
}

impl RetryError {
    pub(crate) fn new(report: RetryReport, source: Option<BoxError>) -> RetryError {
        let kind = match report.stop {
            StopReason::RetriesExhausted { .. } => ErrorKind::Exhausted,
            StopReason::DeadlineReached { .. } => ErrorKind::Deadline,
            StopReason::ServerWaitTooLong { .. } => ErrorKind::ServerWaitTooLong,
            StopReason::BodyNotReplayable { .. } => ErrorKind::NotReplayable,
            StopReason::OverloadedRepeatedly { .. } => ErrorKind::Exhausted,
            StopReason::FallbackTriggered { .. } => ErrorKind::FallbackTriggered,
            StopReason::RecoveryFailed { .. } => ErrorKind::RecoveryFailed,
            StopReason::LeftToGateway => ErrorKind::NotRetryable,
            StopReason::BudgetExhausted { .. } | StopReason::AdmissionFull { .. } => {
                ErrorKind::BudgetExhausted
            }
            StopReason::NotRetryable(_) | StopReason::ServiceFailed | StopReason::Succeeded => {
                ErrorKind::NotRetryable
            }
        };
        RetryError {
            kind,
            report,
            source,
        }
    }

    /// The kind of stop.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The account of every attempt.
    pub fn report(&self) -> &RetryReport {
        &self.report
    }

    /// Whether every allowed retry was spent.
    pub fn is_exhausted(&self) -> bool {
        self.kind == ErrorKind::Exhausted
    }

    /// Whether the deadline stopped the loop.
    pub fn is_deadline(&self) -> bool {
        self.kind == ErrorKind::Deadline
    }

    /// Whether repeated overloads call for the fallback model.
    pub fn is_fallback(&self) -> bool {
        self.kind == ErrorKind::FallbackTriggered
    }

    /// The fallback model to switch to, when [`is_fallback`](Self::is_fallback).
    pub fn fallback_model(&self) -> Option<&str> {
        match &self.report.stop {
            StopReason::FallbackTriggered { model } => Some(model),
            _ => None,
        }
    }

    /// Whether the loop stopped on a failure that is not transient.
    pub fn is_not_retryable(&self) -> bool {
        self.kind == ErrorKind::NotRetryable
    }
}

impl fmt::Display for RetryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.report, f)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl Error for RetryError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}
