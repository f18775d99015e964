//! [`Rejection`]: an outcome that proves the upstream did not execute the
//! request, so another upstream may be given it.

use std::time::Duration;

/// An attempt's outcome that proves the request was not executed: the
/// provider turned it away before doing any work, or it never left.
///
/// Only such an outcome lets a request move to another upstream
/// ([`failover`](crate::failover)); anything else (a timeout after sending,
/// a reset after the request was written, a malformed answer, an auth or
/// configuration error, partial output) may have been executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rejection {
    /// What turned the request away.
    pub(crate) kind: RejectionKind,
    /// The wait its provider named (or the local hold's), if any.
    pub(crate) wait: Option<Duration>,
}

/// What turned a request away before it was executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RejectionKind {
    /// A rate limit: a 429, or a stream whose first event is a
    /// `rate_limit_error`.
    RateLimited,
    /// An overload: a 529, an `overloaded_error` body or first event.
    Overloaded,
    /// The connection was never made.
    NotConnected,
    /// A layer under the retry loop refused the send before it left (a
    /// rate-limit gate's hold, or its deadline).
    NotSent,
}

#[cfg(test)]
impl RejectionKind {
    /// A short, fixed name, for the tests' trails.
    pub(crate) fn label(self) -> &'static str {
        match self {
            RejectionKind::RateLimited => "rate_limited",
            RejectionKind::Overloaded => "overloaded",
            RejectionKind::NotConnected => "not_connected",
            RejectionKind::NotSent => "not_sent",
        }
    }
}
