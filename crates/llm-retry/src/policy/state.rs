//! What one logical request has spent so far.

use super::judge::Judgement;
use super::{Recovery, RecoveryAction};
use crate::budget::Limits;
use crate::classify::{Classification, RetryableKind};
use crate::rate_limit::link::{GateSend, GateWait};
use crate::report::{RetryReport, StopReason};
use http::StatusCode;
use std::time::Duration;
use tokio::time::Instant;

/// The running account of one logical request, from its first send.
///
/// What every request needs is kept inline; what only a request that was
/// retried, recovered or judged beyond a first-try success has is kept in
/// `history`, made the first time it is written: a first-try success
/// moves a small account and allocates nothing for it.
#[derive(Debug, Clone)]
pub(crate) struct RetryState {
    started: Instant,
    attempts: u32,
    /// What a rate-limit gate made of the last send, if one took it.
    gate: Option<GateSend>,
    /// A bound on the elapsed time tighter than the policy's `max_elapsed`:
    /// the caller's deadline, counted from the account's start.
    max_elapsed: Option<Duration>,
    history: Option<Box<History>>,
}

/// What a request that was more than a first-try success has on record.
#[derive(Debug, Clone, Default)]
struct History {
    total_wait: Duration,
    server_waits_honoured: u32,
    /// Waits the backoff computed (the server named none): the exponent.
    computed_waits: u32,
    consecutive_overloads: u32,
    last_status: Option<StatusCode>,
    last_error_type: Option<String>,
    last_class: Option<Classification>,
    last_server_wait: Option<Duration>,
    /// Sends the upstream turned away before executing them.
    rejected_sends: u32,
    /// The last send's rejection, when it was one.
    last_rejection: Option<super::Rejection>,
    recoveries: Vec<RecoveryAction>,
}

impl Default for RetryState {
    fn default() -> Self {
        RetryState::new()
    }
}

impl RetryState {
    /// A fresh account starting now (tokio's clock, so paused-clock tests see virtual time).
    pub(crate) fn new() -> RetryState {
        RetryState::started_at(Instant::now())
    }

    /// A fresh account started at `started`.
    pub(crate) fn started_at(started: Instant) -> RetryState {
        RetryState {
            started,
            attempts: 0,
            gate: None,
            max_elapsed: None,
            history: None,
        }
    }

    /// The record, empty (nothing allocated) if nothing was recorded yet.
    fn history(&self) -> std::borrow::Cow<'_, History> {
        match self.history.as_deref() {
            Some(history) => std::borrow::Cow::Borrowed(history),
            None => std::borrow::Cow::Owned(History::default()),
        }
    }

    /// The record, made now if nothing was recorded yet.
    fn history_mut(&mut self) -> &mut History {
        self.history.get_or_insert_with(Box::default)
    }

    /// When the request started: its first send's instant.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// Sends made so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Time since the account started.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Waits so far whose length the backoff computed because the server
    /// named none. The backoff's exponent counts these only: a request that
    /// honoured five `Retry-After`s and then meets a silent 503 starts the
    /// backoff at its first step, not its sixth.
    pub(crate) fn computed_waits(&self) -> u32 {
        self.history().computed_waits
    }

    /// Overloads in a row, ending at the last attempt.
    pub(crate) fn consecutive_overloads(&self) -> u32 {
        self.history().consecutive_overloads
    }

    /// Ends the request's time at `limit` after its start when that is
    /// sooner than its policy's `max_elapsed`: no wait that would cross it
    /// is started.
    pub(crate) fn bound_elapsed(&mut self, limit: Duration) {
        self.max_elapsed = Some(self.max_elapsed.map_or(limit, |own| own.min(limit)));
    }

    /// The policy's `limits` with this request's own time bound, when it
    /// is tighter.
    pub(crate) fn limits(&self, policy: &Limits) -> Limits {
        let mut limits = *policy;
        if let Some(own) = self.max_elapsed {
            limits.max_elapsed = limits.max_elapsed.min(own);
        }
        limits
    }

    /// Counts a send.
    pub(crate) fn record_send(&mut self) {
        self.attempts = self.attempts.saturating_add(1);
    }

    /// Whether the request is still at its first send, with nothing waited
    /// and nothing recovered: a success now has nothing to report.
    pub(crate) fn untouched(&self) -> bool {
        self.attempts == 1
            && self
                .history
                .as_ref()
                .is_none_or(|h| h.total_wait.is_zero() && h.recoveries.is_empty())
    }

    /// Whether the last send passed a rate-limit gate that paces its key.
    pub(crate) fn gate_paced(&self) -> bool {
        self.gate.is_some_and(|gate| gate.paced)
    }

    /// What a rate-limit gate made of the last send, if one took it.
    pub(crate) fn gate(&self) -> Option<GateSend> {
        self.gate
    }

    /// Records what a gate made of the last send (`None`: none took it).
    pub(crate) fn set_gate(&mut self, gate: Option<GateSend>) {
        self.gate = gate;
    }

    /// Records what the gate did with the last send's outcome.
    pub(crate) fn set_gate_wait(&mut self, wait: GateWait) {
        if let Some(gate) = &mut self.gate {
            gate.wait = wait;
        }
    }

    /// Records the judged outcome of the last send.
    pub(crate) fn record_outcome(&mut self, status: Option<StatusCode>, judgement: &Judgement) {
        if !judgement.reached_upstream {
            // Refused before it left: not a send, and not news about the upstream.
            self.attempts = self.attempts.saturating_sub(1);
            return;
        }
        let history = self.history_mut();
        history.last_status = status;
        history.last_error_type = judgement
            .provider
            .as_ref()
            .and_then(|p| p.kind.clone().or_else(|| p.code.clone()));
        history.consecutive_overloads = match judgement.class {
            Classification::Retryable(RetryableKind::Overloaded) => {
                history.consecutive_overloads.saturating_add(1)
            }
            _ => 0,
        };
        history.last_class = Some(judgement.class.clone());
        history.last_server_wait = judgement.hint.wait.map(|w| w.duration);
        history.last_rejection = judgement.rejection;
        if judgement.rejection.is_some() {
            history.rejected_sends = history.rejected_sends.saturating_add(1);
        }
    }

    /// Records a recovery about to be applied.
    pub(crate) fn record_recovery(&mut self, recovery: &Recovery) {
        let history = self.history_mut();
        if matches!(recovery, Recovery::FallbackModel { .. }) {
            // A new model starts a new streak.
            history.consecutive_overloads = 0;
        }
        history.recoveries.push(recovery.action());
    }

    /// Whether a recovery of this kind was already applied to this request.
    pub(crate) fn recovered(&self, action: RecoveryAction) -> bool {
        self.history().recoveries.contains(&action)
    }

    /// Records a wait about to be slept.
    pub(crate) fn record_wait(&mut self, delay: Duration, server_named: bool) {
        let history = self.history_mut();
        history.total_wait = history.total_wait.saturating_add(delay);
        if server_named {
            history.server_waits_honoured = history.server_waits_honoured.saturating_add(1);
        } else {
            history.computed_waits = history.computed_waits.saturating_add(1);
        }
    }

    /// The report, `elapsed` after the start (read by the caller already).
    pub(crate) fn report_after(&self, stop: StopReason, elapsed: Duration) -> RetryReport {
        let history = self.history();
        RetryReport {
            attempts: self.attempts,
            total_wait: history.total_wait,
            elapsed,
            server_waits_honoured: history.server_waits_honoured,
            last_status: history.last_status,
            last_error_type: history.last_error_type.clone(),
            last_class: history.last_class.clone(),
            last_server_wait: history.last_server_wait,
            rejected_sends: history.rejected_sends,
            last_rejection: history.last_rejection,
            recoveries: history.recoveries.clone(),
            stop,
        }
    }
}
