//! [`FailoverError`]: a request a failover could hand no answer for.

use super::report::{FailoverReport, FailoverStop};
use crate::error::BoxError;
use std::fmt;

/// A request ended without an answer to hand over. Carries the
/// [`FailoverReport`] and, as its source, the last target's error.
#[derive(Debug)]
pub struct FailoverError {
    report: FailoverReport,
    retry_after: Option<std::time::Duration>,
    rate_limited: bool,
    source: Option<BoxError>,
}

impl FailoverError {
    /// An error ending as `report.stop` says.
    pub(super) fn new(report: FailoverReport, source: Option<BoxError>) -> FailoverError {
        FailoverError {
            report,
            retry_after: None,
            rate_limited: false,
            source,
        }
    }

    /// The same error, telling when a target takes requests again.
    pub(super) fn with_retry_after(mut self, wait: Option<std::time::Duration>) -> FailoverError {
        self.retry_after = wait;
        self
    }

    /// The same error, telling whether a rate limit named its wait.
    pub(super) fn with_rate_limited(mut self, rate_limited: bool) -> FailoverError {
        self.rate_limited = rate_limited;
        self
    }

    /// Whether the wait in [`retry_after`](Self::retry_after) was named by
    /// a rate limit (a 429, or a window with no request left), rather than
    /// an overload: a gateway then answers its client with a rate limit.
    pub fn is_rate_limited(&self) -> bool {
        self.rate_limited && self.retry_after.is_some()
    }

    /// For an exhausted failover, the wait left until the soonest target
    /// takes requests again, when a provider named one: what a gateway
    /// sends its own client as `retry-after`.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.retry_after
    }

    /// Why the failover stopped (its report's
    /// [`stop`](FailoverReport::stop)): never
    /// [`Answered`](FailoverStop::Answered).
    pub fn stop(&self) -> FailoverStop {
        self.report.stop
    }

    /// What the failover did.
    pub fn report(&self) -> &FailoverReport {
        &self.report
    }
}

impl fmt::Display for FailoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.report.stop {
            FailoverStop::Exhausted => write!(f, "failover exhausted: {}", self.report),
            FailoverStop::FirstContentTimeout => write!(f, "failover stalled: {}", self.report),
            FailoverStop::Answered | FailoverStop::Failed => {
                write!(f, "failover stopped: {}", self.report)
            }
            FailoverStop::Deadline => write!(f, "failover deadline passed: {}", self.report),
            FailoverStop::BodyTooLarge { cap } => {
                write!(
                    f,
                    "request body is larger than the failover's {cap}-byte buffer"
                )
            }
            FailoverStop::BodyFailed => f.write_str("request body failed while it was read"),
            FailoverStop::Rewrite => f.write_str("a target's request rewrite failed"),
        }
    }
}

impl std::error::Error for FailoverError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
