//! What happened to a logical request: every attempt counted, why it stopped.

mod recovery_action;
mod rejection;

pub use recovery_action::RecoveryAction;
pub(crate) use rejection::{Rejection, RejectionKind};

use crate::classify::{Classification, FatalKind};
use http::StatusCode;
use std::fmt;
use std::time::Duration;

/// Why the retry loop stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The last attempt succeeded.
    Succeeded,
    /// The last outcome is not worth another attempt.
    NotRetryable(FatalKind),
    /// Every allowed retry was spent.
    RetriesExhausted {
        /// The configured number of retries.
        max_retries: u32,
    },
    /// The server asked for a longer wait than the policy honours.
    ServerWaitTooLong {
        /// The wait the server named.
        asked: Duration,
        /// The longest honoured wait.
        limit: Duration,
    },
    /// The next wait would have ended past the request's deadline.
    DeadlineReached {
        /// Time spent when the wait would have started.
        elapsed: Duration,
        /// The wait that was not started.
        wait: Duration,
        /// The deadline.
        limit: Duration,
    },
    /// The inner service failed instead of becoming ready for a resend.
    ServiceFailed,
    /// Behind a gateway, a rate limit, overload or 5xx is the gateway's to retry.
    LeftToGateway,
    /// Too many overloads in a row and no fallback model to switch to.
    OverloadedRepeatedly {
        /// Overloads in a row.
        count: u32,
    },
    /// Too many overloads in a row: the caller should switch to this model.
    FallbackTriggered {
        /// The configured fallback model.
        model: String,
    },
    /// A recovery could not be applied.
    RecoveryFailed {
        /// Which recovery.
        action: RecoveryAction,
        /// Why it could not be applied.
        reason: String,
    },
    /// The shared retry budget had nothing left for this resend.
    BudgetExhausted {
        /// The budget's own account, e.g. "12 retries already spent against 50 requests…".
        reason: String,
    },
    /// Too many retries of this budget were already waiting.
    AdmissionFull {
        /// The budget's limit on waiting retries.
        max_waiting: usize,
    },
    /// The request body grew past the replay buffer, so it cannot be sent again.
    BodyNotReplayable {
        /// The replay buffer's cap in bytes.
        cap: usize,
    },
    /// The caller's request body failed while it was sent, so the rest of
    /// it is unknown and it cannot be sent again.
    RequestBodyFailed,
}

impl StopReason {
    /// Whether every allowed retry was spent.
    pub fn is_retries_exhausted(&self) -> bool {
        matches!(self, StopReason::RetriesExhausted { .. })
    }

    /// Whether overloads in a row ended the loop, with no fallback model.
    pub fn is_overloaded_repeatedly(&self) -> bool {
        matches!(self, StopReason::OverloadedRepeatedly { .. })
    }

    /// Whether the deadline left no room for another wait or attempt.
    pub fn is_deadline(&self) -> bool {
        matches!(self, StopReason::DeadlineReached { .. })
    }

    /// Whether the server asked for a longer wait than the policy honours.
    pub fn is_server_wait_too_long(&self) -> bool {
        matches!(self, StopReason::ServerWaitTooLong { .. })
    }

    /// Whether the loop stopped on a failure another attempt would not fix.
    pub fn is_not_retryable(&self) -> bool {
        matches!(self, StopReason::NotRetryable(_))
    }

    /// Whether the failure was left to the gateway in front of the upstream.
    pub fn is_left_to_gateway(&self) -> bool {
        matches!(self, StopReason::LeftToGateway)
    }

    /// Whether the inner service failed instead of becoming ready for a resend.
    pub fn is_service_failed(&self) -> bool {
        matches!(self, StopReason::ServiceFailed)
    }

    /// Whether repeated overloads call for the fallback model
    /// ([`fallback_model`](Self::fallback_model) names it).
    pub fn is_fallback(&self) -> bool {
        matches!(self, StopReason::FallbackTriggered { .. })
    }

    /// Whether a recovery (max_tokens cut, credential refresh) could not be applied.
    pub fn is_recovery_failed(&self) -> bool {
        matches!(self, StopReason::RecoveryFailed { .. })
    }

    /// Whether the shared retry budget refused the resend.
    pub fn is_budget_exhausted(&self) -> bool {
        matches!(self, StopReason::BudgetExhausted { .. })
    }

    /// Whether too many retries of the budget were already waiting.
    pub fn is_admission_full(&self) -> bool {
        matches!(self, StopReason::AdmissionFull { .. })
    }

    /// Whether the request body outgrew the replay buffer.
    pub fn is_not_replayable(&self) -> bool {
        matches!(self, StopReason::BodyNotReplayable { .. })
    }

    /// Whether the caller's request body failed while it was sent.
    pub fn is_request_body_failed(&self) -> bool {
        matches!(self, StopReason::RequestBodyFailed)
    }

    /// The fallback model to switch to, when [`is_fallback`](Self::is_fallback).
    pub fn fallback_model(&self) -> Option<&str> {
        match self {
            StopReason::FallbackTriggered { model } => Some(model),
            _ => None,
        }
    }

    /// A short, fixed name for metrics and logs (`retries_exhausted`, …).
    pub fn label(&self) -> &'static str {
        match self {
            StopReason::Succeeded => "succeeded",
            StopReason::NotRetryable(_) => "not_retryable",
            StopReason::RetriesExhausted { .. } => "retries_exhausted",
            StopReason::ServerWaitTooLong { .. } => "server_wait_too_long",
            StopReason::DeadlineReached { .. } => "deadline",
            StopReason::LeftToGateway => "left_to_gateway",
            StopReason::OverloadedRepeatedly { .. } => "overloaded_repeatedly",
            StopReason::FallbackTriggered { .. } => "fallback_triggered",
            StopReason::RecoveryFailed { .. } => "recovery_failed",
            StopReason::BudgetExhausted { .. } => "budget_exhausted",
            StopReason::AdmissionFull { .. } => "admission_full",
            StopReason::ServiceFailed => "service_failed",
            StopReason::BodyNotReplayable { .. } => "body_not_replayable",
            StopReason::RequestBodyFailed => "request_body_failed",
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Succeeded => f.write_str("succeeded"),
            StopReason::NotRetryable(kind) => write!(f, "not retryable: {}", DisplayFatal(kind)),
            StopReason::RetriesExhausted { max_retries } => {
                write!(f, "all {max_retries} retries spent")
            }
            StopReason::ServerWaitTooLong { asked, limit } => write!(
                f,
                "server asked to wait {}, more than the {} limit",
                Secs(*asked),
                Secs(*limit)
            ),
            StopReason::DeadlineReached {
                elapsed,
                wait,
                limit,
            } => write!(
                f,
                "a {} wait after {} would cross the {} deadline",
                Secs(*wait),
                Secs(*elapsed),
                Secs(*limit)
            ),
            StopReason::LeftToGateway => {
                f.write_str("left to the gateway, which manages rate limits and overloads")
            }
            StopReason::OverloadedRepeatedly { count } => {
                write!(
                    f,
                    "overloaded {count} times in a row and no fallback model is configured"
                )
            }
            StopReason::FallbackTriggered { model } => {
                write!(
                    f,
                    "overloaded repeatedly: switch to the fallback model {model}"
                )
            }
            StopReason::RecoveryFailed { action, reason } => {
                write!(f, "{action} impossible: {reason}")
            }
            StopReason::BudgetExhausted { reason } => f.write_str(reason),
            StopReason::AdmissionFull { max_waiting } => {
                write!(
                    f,
                    "retry suppressed: {max_waiting} retries are already waiting"
                )
            }
            StopReason::ServiceFailed => f.write_str("the inner service failed before a resend"),
            StopReason::BodyNotReplayable { cap } => write!(
                f,
                "request body is larger than the {cap}-byte replay buffer and cannot be resent"
            ),
            StopReason::RequestBodyFailed => {
                f.write_str("the request body failed while it was sent and cannot be resent")
            }
        }
    }
}

struct DisplayFatal<'a>(&'a FatalKind);

impl fmt::Display for DisplayFatal<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            FatalKind::ServerDeclined(s) => write!(f, "server sent x-should-retry: false on {s}"),
            FatalKind::QuotaExhausted(s) => write!(f, "quota or billing limit reached ({s})"),
            FatalKind::ContextOverflow(_) => f.write_str("prompt exceeds the context window"),
            FatalKind::Unauthorized => f.write_str("credentials rejected (401)"),
            FatalKind::LocalRateLimit => {
                f.write_str("the local rate limit cannot admit this send in time")
            }
            FatalKind::StreamCommitted => {
                f.write_str("the stream failed after content reached the caller")
            }
            FatalKind::Status(s) => write!(f, "status {s}"),
        }
    }
}

/// A duration printed in seconds with one decimal, e.g. `93.2 s`.
pub(crate) struct Secs(pub(crate) Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs_f64();
        if secs.fract() == 0.0 {
            write!(f, "{secs:.0} s")
        } else {
            write!(f, "{secs:.1} s")
        }
    }
}

/// The account of one logical request: carried by every
/// [`RetryError`](crate::RetryError), and attached to the final response's
/// extensions unless that response was a success at the first attempt with
/// nothing waited (a response without one was served that way).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryReport {
    /// Sends made, the first included.
    pub attempts: u32,
    /// Time spent waiting between attempts: asleep, or (for a rate limit's
    /// named wait under a pacing gate) queued in the gate for the key's hold.
    pub total_wait: Duration,
    /// Time from the first send to the final answer.
    pub elapsed: Duration,
    /// Waits that honoured a server-named delay.
    pub server_waits_honoured: u32,
    /// The status of the last response, if the last attempt got one.
    pub last_status: Option<StatusCode>,
    /// The provider's `error.type` (or `error.code`) of the last response.
    pub last_error_type: Option<String>,
    /// The classification of the last outcome.
    pub last_class: Option<Classification>,
    /// The wait the last response named, if any (for a gateway's own `retry-after`).
    pub last_server_wait: Option<Duration>,
    /// Sends that provably were not executed: a 429 or a 529, a
    /// connection never made, a send a gate below refused:
    /// when it equals `attempts`, no send of the request was executed.
    pub rejected_sends: u32,
    /// The last send's rejection, when it was one.
    pub(crate) last_rejection: Option<Rejection>,
    /// Recoveries applied, in order.
    pub recoveries: Vec<RecoveryAction>,
    /// Why the loop stopped.
    pub stop: StopReason,
}

impl RetryReport {
    /// A report of a request that made no send and waited nothing,
    /// stopping for `stop`: a stand-in (in a test, a mock service) whose
    /// fields are then set to what it stands for.
    ///
    /// ```
    /// use llm_retry::{RetryReport, StopReason};
    ///
    /// let mut report = RetryReport::new(StopReason::LeftToGateway);
    /// report.attempts = 1;
    /// assert!(!report.retried());
    /// ```
    pub fn new(stop: StopReason) -> RetryReport {
        RetryReport {
            attempts: 0,
            total_wait: Duration::ZERO,
            elapsed: Duration::ZERO,
            server_waits_honoured: 0,
            last_status: None,
            last_error_type: None,
            last_class: None,
            last_server_wait: None,
            rejected_sends: 0,
            last_rejection: None,
            recoveries: Vec::new(),
            stop,
        }
    }

    /// Whether more than one attempt was made.
    pub fn retried(&self) -> bool {
        self.attempts > 1
    }
}

impl fmt::Display for RetryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let noun = if self.attempts == 1 {
            "attempt"
        } else {
            "attempts"
        };
        if self.stop == StopReason::Succeeded {
            write!(
                f,
                "succeeded after {} {noun} in {}",
                self.attempts,
                Secs(self.elapsed)
            )?;
        } else {
            write!(
                f,
                "gave up after {} {noun} in {}",
                self.attempts,
                Secs(self.elapsed)
            )?;
            match (self.last_status, &self.last_error_type) {
                (Some(s), Some(t)) => write!(f, ": last status {} {t}", s.as_u16())?,
                (Some(s), None) => write!(f, ": last status {}", s.as_u16())?,
                (None, Some(t)) => write!(f, ": last error {t}")?,
                (None, None) => {}
            }
            write!(f, " ({})", self.stop)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(stop: StopReason) -> RetryReport {
        RetryReport {
            attempts: 10,
            total_wait: Duration::from_secs(90),
            elapsed: Duration::from_millis(93_200),
            last_status: Some(StatusCode::from_u16(529).expect("valid")),
            last_error_type: Some("overloaded_error".into()),
            ..RetryReport::new(stop)
        }
    }

    #[test]
    fn give_up_message_names_attempts_time_status_and_reason() {
        let r = report(StopReason::RetriesExhausted { max_retries: 9 });
        assert_eq!(
            r.to_string(),
            "gave up after 10 attempts in 93.2 s: last status 529 overloaded_error (all 9 retries spent)"
        );
    }

    #[test]
    fn long_server_wait_message_names_both_numbers() {
        let stop = StopReason::ServerWaitTooLong {
            asked: Duration::from_secs(200),
            limit: Duration::from_secs(120),
        };
        assert_eq!(
            stop.to_string(),
            "server asked to wait 200 s, more than the 120 s limit"
        );
    }

    #[test]
    fn short_durations_keep_a_decimal() {
        assert_eq!(Secs(Duration::from_millis(1500)).to_string(), "1.5 s");
        assert_eq!(Secs(Duration::from_millis(93_240)).to_string(), "93.2 s");
        assert_eq!(Secs(Duration::from_secs(2)).to_string(), "2 s");
    }
}
