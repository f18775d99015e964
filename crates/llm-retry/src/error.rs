//! The one error type a retried request can end with.

use crate::report::{RetryReport, StopReason};
use std::error::Error;
use std::fmt;

/// A boxed, thread-safe error: what every service in this crate returns.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// A logical request ended without a response to hand over: the last
/// attempt failed before a complete response arrived and no further attempt
/// was allowed, or the stop needs the caller's action even though a
/// response arrived (a manual fallback: [`StopReason::is_fallback`]).
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

impl RetryError {
    pub(crate) fn new(report: RetryReport, source: Option<BoxError>) -> RetryError {
        RetryError { report, source }
    }

    /// The account of every attempt.
    pub fn report(&self) -> &RetryReport {
        &self.report
    }

    /// Why the loop stopped: the report's [`StopReason`], whose predicates
    /// ([`StopReason::is_deadline`], [`StopReason::is_fallback`], …) say
    /// what the caller can do next.
    pub fn stop(&self) -> &StopReason {
        &self.report.stop
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
        let mut report = RetryReport::new(stop);
        report.attempts = 1;
        RetryError::new(report, source)
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
    fn every_stop_has_its_own_predicate() {
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
        let predicates: [fn(&StopReason) -> bool; 13] = [
            StopReason::is_retries_exhausted,
            StopReason::is_overloaded_repeatedly,
            StopReason::is_deadline,
            StopReason::is_server_wait_too_long,
            StopReason::is_not_retryable,
            StopReason::is_left_to_gateway,
            StopReason::is_service_failed,
            StopReason::is_fallback,
            StopReason::is_recovery_failed,
            StopReason::is_budget_exhausted,
            StopReason::is_admission_full,
            StopReason::is_not_replayable,
            StopReason::is_request_body_failed,
        ];
        for (i, stop) in stops.iter().enumerate() {
            let e = error(stop.clone(), None);
            assert_eq!(e.stop(), stop);
            for (j, is) in predicates.iter().enumerate() {
                assert_eq!(is(e.stop()), i == j, "{stop:?}: predicate {j}");
            }
        }
        assert!(predicates.iter().all(|is| !is(&StopReason::Succeeded)));
    }
}
