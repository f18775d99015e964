//! Where a target's cooldown and unhealthy mark are also kept, so that
//! other processes in front of the same targets see them:
//! [`SharedMarks`].

use std::fmt;
use tokio::time::Instant;

/// Which of a target's marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MarkKind {
    /// Skipped until a wait its provider named has passed
    /// ([`Target::cooldown`](super::Target::cooldown)).
    Cooldown,
    /// Skipped after failing too often
    /// ([`Target::unhealthy_after`](super::Target::unhealthy_after)).
    Unhealthy,
}

/// Until when a target is set aside, and whether a rate limit (rather than
/// an overload or its failures) set it aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// When the target takes requests again.
    pub until: Instant,
    /// Whether a rate limit named the wait.
    pub rate_limited: bool,
}

/// Marks shared by the processes in front of the same targets (see
/// [`Target::shared_marks`](super::Target::shared_marks)). A target still
/// keeps its own marks: a shared one can only set it aside longer.
///
/// Both methods are synchronous and must return promptly: they run inside
/// a request's failover. A store backed by a remote service answers from
/// memory and talks to the service off the request path.
pub trait SharedMarks: fmt::Debug + Send + Sync {
    /// This process set `target` aside until `mark.until`.
    fn publish(&self, target: &str, kind: MarkKind, mark: Mark);

    /// The latest mark of `kind` any process published for `target`, if
    /// it knows one (ended or not).
    fn read(&self, target: &str, kind: MarkKind) -> Option<Mark>;
}
