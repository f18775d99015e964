//! [`FailoverError`]: a request a failover could hand no answer for.

use super::report::FailoverReport;
use crate::error::BoxError;
use std::fmt;

/// A request ended without an answer to hand over. Carries the
/// [`FailoverReport`] and, as its source, the last target's error.
#[derive(Debug)]
pub struct FailoverError {
    kind: FailoverErrorKind,
    report: FailoverReport,
    retry_after: Option<std::time::Duration>,
    rate_limited: bool,
    source: Option<BoxError>,
}

/// What kind of end a [`FailoverError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailoverErrorKind {
    /// Every target turned the request away without an answer to hand
    /// over (connections refused, sends refused locally, all cooling down).
    Exhausted,
    /// No target sent its answer (for a stream under the stream guard: its
    /// first content) within its
    /// [`first_content_timeout`](super::Target::first_content_timeout),
    /// and no other answer came to hand over: the upstream stalled.
    FirstContentTimeout,
    /// A target failed in a way that may have executed the request: no
    /// other target was tried.
    Failed,
    /// The request's deadline passed.
    Deadline,
    /// The request body is larger than the failover keeps.
    BodyTooLarge {
        /// The cap in bytes.
        cap: usize,
    },
    /// The request body failed while it was read.
    BodyFailed,
    /// A target's rewrite of the request failed.
    Rewrite,
}

impl FailoverError {
    pub(super) fn new(
        kind: FailoverErrorKind,
        report: FailoverReport,
        source: Option<BoxError>,
    ) -> FailoverError {
        FailoverError {
            kind,
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

    /// What kind of end this is.
    pub fn kind(&self) -> FailoverErrorKind {
        self.kind
    }

    /// What the failover did.
    pub fn report(&self) -> &FailoverReport {
        &self.report
    }
}

impl fmt::Display for FailoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FailoverErrorKind::Exhausted => write!(f, "failover exhausted: {}", self.report),
            FailoverErrorKind::FirstContentTimeout => write!(
                f,
                "no first content within the first-content timeout: {}",
                self.report
            ),
            FailoverErrorKind::Failed => write!(f, "failover stopped: {}", self.report),
            FailoverErrorKind::Deadline => write!(f, "failover deadline passed: {}", self.report),
            FailoverErrorKind::BodyTooLarge { cap } => {
                write!(
                    f,
                    "request body is larger than the failover's {cap}-byte buffer"
                )
            }
            FailoverErrorKind::BodyFailed => f.write_str("request body failed while it was read"),
            FailoverErrorKind::Rewrite => f.write_str("a target's request rewrite failed"),
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
