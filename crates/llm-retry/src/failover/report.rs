//! What a failover did with one request: every target attempt, every
//! round, why it stopped.

use super::marks::MarkKind;
use crate::policy::Rejection;
use http::StatusCode;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Every attempt a [`Failover`](super::Failover) made for one request, in
/// the extensions of the answer it returned (and in a
/// [`FailoverError`](super::FailoverError)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailoverReport {
    /// Rounds begun (1 without a further round).
    pub rounds: u32,
    /// Upstream sends made, over every target and round (a target's retry
    /// stack may make several per attempt).
    pub upstream_sends: u32,
    /// Each target the request went to or skipped, in order (the report's
    /// `Debug` shows them).
    pub(crate) attempts: Vec<TargetAttempt>,
    /// The target whose answer was handed over.
    pub(crate) answered_by: Option<Arc<str>>,
    /// Time spent waiting between rounds.
    pub waited: Duration,
    /// Why no further round began, when a round was exhausted (the
    /// report's `Display` names it).
    pub(crate) suppressed: Option<Suppression>,
    /// Why the failover stopped.
    pub stop: FailoverStop,
}

impl FailoverReport {
    pub(super) fn new() -> FailoverReport {
        FailoverReport {
            rounds: 1,
            upstream_sends: 0,
            attempts: Vec::new(),
            answered_by: None,
            waited: Duration::ZERO,
            suppressed: None,
            stop: FailoverStop::Answered,
        }
    }

    /// Target attempts made (skips not counted).
    pub fn target_attempts(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| !matches!(a.outcome, AttemptOutcome::Skipped(_)))
            .count()
    }

    /// The target whose answer was handed over (a success, a failure, or
    /// an exhausted request's last rejection): `None` when the failover
    /// handed over no answer, as in a
    /// [`FailoverError`](super::FailoverError)'s report.
    pub fn answered_by(&self) -> Option<&Arc<str>> {
        self.answered_by.as_ref()
    }

    /// The targets a mark set aside, each with that mark, in the order
    /// they were met (a target set aside in several rounds is named in
    /// each): [`MarkKind::Cooldown`] while inside a wait its provider named
    /// (for every request naming the same model with
    /// [`cooldown`](super::Target::cooldown), or for this one in a
    /// further round), [`MarkKind::Unhealthy`] after
    /// failing too often ([`unhealthy_after`](super::Target::unhealthy_after)).
    /// A mark another process published through
    /// [`SharedMarks`](super::SharedMarks) counts as the target's own.
    pub fn set_aside(&self) -> impl Iterator<Item = (&str, MarkKind)> + '_ {
        self.attempts.iter().filter_map(|a| match a.outcome {
            AttemptOutcome::Skipped(SkipReason::CoolingDown) => {
                Some((&*a.target, MarkKind::Cooldown))
            }
            AttemptOutcome::Skipped(SkipReason::Unhealthy) => {
                Some((&*a.target, MarkKind::Unhealthy))
            }
            _ => None,
        })
    }
}

/// One target's turn in one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TargetAttempt {
    /// The target's name.
    pub(crate) target: Arc<str>,
    /// The round, from 1.
    pub(crate) round: u32,
    /// What came of it.
    pub(crate) outcome: AttemptOutcome,
}

/// What came of one target's turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AttemptOutcome {
    /// An answer the failover handed over (a success, or a failure that is
    /// not a certified rejection).
    Answered(StatusCode),
    /// The target turned the request away before executing it.
    Rejected(Rejection),
    /// An overload or a 5xx answered before any content, with this status
    /// (502, 503, 504, 529, or a 500 whose body names `server_error` or
    /// `overloaded_error`), that is not certified as a rejection: the
    /// request moved on to the next target, and no further round begins.
    MovedOn(StatusCode),
    /// No answer (or first content) within the target's first-content time.
    FirstContentTimeout,
    /// The target failed in a way that may have executed the request.
    Failed,
    /// The target was not tried.
    Skipped(SkipReason),
}

/// Why a target was not tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SkipReason {
    /// The request is bound to provider state held by the first target.
    StateBound,
    /// The round's `max_target_attempts` were spent.
    AttemptLimit,
    /// The target is cooling down after its provider named a wait.
    CoolingDown,
    /// The target failed too often lately
    /// ([`unhealthy_after`](super::Target::unhealthy_after)).
    Unhealthy,
    /// The request's send budget has fewer sends left than the target may make.
    SendBudget,
    /// The request's deadline has passed.
    Deadline,
}

#[cfg(test)]
impl SkipReason {
    /// A short, fixed name, for the tests' trails.
    pub(crate) fn label(self) -> &'static str {
        match self {
            SkipReason::StateBound => "state_bound",
            SkipReason::AttemptLimit => "attempt_limit",
            SkipReason::CoolingDown => "cooling_down",
            SkipReason::Unhealthy => "unhealthy",
            SkipReason::SendBudget => "send_budget",
            SkipReason::Deadline => "deadline",
        }
    }
}

/// Why an exhausted round was not followed by another: a closed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Suppression {
    /// No `exhaustion_retry` is configured: one pass only.
    Disabled,
    /// Every allowed round was spent.
    RoundsSpent,
    /// The request is bound to provider state.
    StateBound,
    /// An attempt of the round may have been executed (a first-content
    /// timeout, or an overload answered before content that is not
    /// certified as a rejection): only certified rejections allow a
    /// further round.
    Ambiguous,
    /// An attempt was turned away for another reason than a rate limit or
    /// an overload (a connection never made, a send refused locally).
    NotThrottled,
    /// The shutdown started.
    Shutdown,
    /// The request's send budget is spent.
    SendBudget,
    /// The soonest wait a provider named is longer than `max_wait`.
    WaitTooLong {
        /// The wait that was named.
        asked: Duration,
        /// The longest wait between rounds.
        limit: Duration,
    },
    /// The deadline cannot hold the wait and one more attempt (or passed
    /// during one).
    Deadline,
    /// Too many requests of this failover are already waiting for a round.
    AdmissionFull,
}

impl Suppression {
    /// A short, fixed name for metrics and logs.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Suppression::Disabled => "disabled",
            Suppression::RoundsSpent => "rounds_spent",
            Suppression::StateBound => "state_bound",
            Suppression::Ambiguous => "ambiguous",
            Suppression::NotThrottled => "not_throttled",
            Suppression::Shutdown => "shutdown",
            Suppression::SendBudget => "send_budget",
            Suppression::WaitTooLong { .. } => "wait_too_long",
            Suppression::Deadline => "deadline",
            Suppression::AdmissionFull => "admission_full",
        }
    }
}

/// Why a failover stopped: in its [`FailoverReport`], and read through
/// [`FailoverError::stop`](super::FailoverError::stop) when no answer was
/// handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailoverStop {
    /// A target's answer was handed over.
    Answered,
    /// Every round ended with every target turning the request away; the
    /// last rejection was handed over, or, with none to hand over
    /// (connections refused, sends refused locally, all cooling down), a
    /// [`FailoverError`](super::FailoverError) returned.
    Exhausted,
    /// No target sent its answer (for a stream under the stream guard: its
    /// first content) within its
    /// [`first_content_timeout`](super::Target::first_content_timeout),
    /// and no other answer came to hand over: the upstream stalled.
    FirstContentTimeout,
    /// A target failed in a way that may have executed the request: no
    /// other target was tried.
    Failed,
    /// The deadline passed with no answer to hand over.
    Deadline,
    /// The request body is larger than the failover keeps.
    BodyTooLarge {
        /// The cap in bytes.
        cap: usize,
    },
    /// The request body failed while it was read.
    BodyFailed,
    /// A target's [`rewrite`](super::Target::rewrite) of the request failed.
    Rewrite,
}

impl fmt::Display for FailoverReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stop = match self.stop {
            FailoverStop::Answered => "answered",
            FailoverStop::Exhausted => "every target turned the request away",
            FailoverStop::FirstContentTimeout => "no target sent its first content in time",
            FailoverStop::Failed => "a target failed",
            FailoverStop::Deadline => "the deadline passed",
            FailoverStop::BodyTooLarge { .. } => "the request body is too large",
            FailoverStop::BodyFailed => "the request body failed",
            FailoverStop::Rewrite => "a rewrite failed",
        };
        write!(
            f,
            "{stop} after {} target attempts, {} upstream sends, {} round{}",
            self.target_attempts(),
            self.upstream_sends,
            self.rounds,
            if self.rounds == 1 { "" } else { "s" }
        )?;
        if let Some(suppressed) = self.suppressed {
            write!(f, " (no further round: {})", suppressed.label())?;
        }
        Ok(())
    }
}
