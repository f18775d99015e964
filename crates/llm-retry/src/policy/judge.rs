//! One attempt's outcome → accept, stop, or retry after a delay.

use super::{Recovery, RetryPolicy, RetryState};
use crate::backoff::spread_server_wait;
use crate::budget::Refusal;
use crate::classify::{
    classify_error, classify_response, Classification, FatalKind, ProviderError, RetryableKind,
};
use crate::hint::{parse_hint, ServerHint, ServerWait, WaitSource};
use crate::report::StopReason;
use crate::stream_guard::PreContentError;
use http::{HeaderMap, StatusCode};
use std::error::Error;
use std::time::Duration;

/// What an attempt produced.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    /// A response arrived.
    Response {
        /// Its status.
        status: StatusCode,
        /// Its headers.
        headers: &'a HeaderMap,
        /// The start of its body, when it was read (failed responses only).
        body: Option<&'a [u8]>,
    },
    /// No response: the attempt failed with an error.
    Error(&'a (dyn Error + 'static)),
}

/// What to do after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The outcome is a success: hand it to the caller.
    Accept,
    /// Send again after `delay`.
    Retry {
        /// How long to sleep first.
        delay: Duration,
        /// The server-named wait the delay honours, if any.
        server_wait: Option<ServerWait>,
    },
    /// Change the request and send it again at once.
    Recover(Recovery),
    /// Hand the outcome to the caller as final.
    Stop(StopReason),
}

/// The policy's reading of one outcome and its decision.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Judgement {
    /// How the outcome was classified.
    pub class: Classification,
    /// The provider error in the body, if one was read.
    pub provider: Option<ProviderError>,
    /// What the server said about retrying.
    pub hint: ServerHint,
    /// What to do next.
    pub decision: Decision,
}

impl RetryPolicy {
    /// Judges an attempt's outcome for a request whose account is `state`
    /// (with the attempt already counted), `elapsed` after its first send.
    pub fn judge(&self, state: &RetryState, outcome: Outcome<'_>, elapsed: Duration) -> Judgement {
        let (class, provider, hint) = match outcome {
            Outcome::Response {
                status,
                headers,
                body,
            } => {
                let provider = body.and_then(ProviderError::parse);
                let class = classify_response(status, headers, provider.as_ref());
                let hint = match &class {
                    Classification::Retryable(kind) => {
                        named_wait_for(*kind, parse_hint(headers, body, self.now()))
                    }
                    _ => ServerHint::default(),
                };
                (class, provider, hint)
            }
            Outcome::Error(error) => (
                classify_error(error),
                pre_content(&outcome).and_then(|e| e.provider_error().cloned()),
                ServerHint::default(),
            ),
        };
        let decision = match &class {
            Classification::Success => Decision::Accept,
            Classification::Fatal(FatalKind::ContextOverflow(overflow)) => {
                self.on_context_overflow(state, overflow, elapsed)
            }
            Classification::Fatal(FatalKind::Unauthorized) => self.on_unauthorized(state, elapsed),
            Classification::Fatal(kind) => Decision::Stop(StopReason::NotRetryable(kind.clone())),
            Classification::Retryable(kind) => {
                let gateway_managed = self.behind_gateway()
                    && hint.should_retry != Some(true)
                    && (status_of(&outcome).is_some() || pre_content(&outcome).is_some())
                    && matches!(
                        kind,
                        RetryableKind::RateLimited
                            | RetryableKind::Overloaded
                            | RetryableKind::Status(_)
                    );
                if gateway_managed {
                    Decision::Stop(StopReason::LeftToGateway)
                } else if let Some(decision) = (*kind == RetryableKind::Overloaded)
                    .then(|| self.on_overload_streak(state, elapsed))
                    .flatten()
                {
                    decision
                } else {
                    self.plan_retry(state, hint.wait, elapsed)
                        .unwrap_or_else(|refusal| Decision::Stop(refusal.into()))
                }
            }
        };
        Judgement {
            class,
            provider,
            hint,
            decision,
        }
    }

    fn plan_retry(
        &self,
        state: &RetryState,
        server_wait: Option<ServerWait>,
        elapsed: Duration,
    ) -> Result<Decision, Refusal> {
        let limits = self.limits();
        limits.admit_retry(state.attempts().max(1))?;
        let delay = {
            let mut rng = self
                .config
                .rng
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match server_wait {
                Some(wait) => {
                    limits.admit_server_wait(wait.duration)?;
                    spread_server_wait(wait.duration, &mut *rng)
                }
                None => self
                    .backoff()
                    .delay(state.computed_waits().saturating_add(1), &mut *rng),
            }
        };
        // Timers tick in whole milliseconds; rounding up here keeps the
        // deadline check exact for the wait that will really be slept.
        let delay = ceil_millis(delay);
        limits.admit_wait(elapsed, delay)?;
        Ok(Decision::Retry { delay, server_wait })
    }
}

/// Which named waits apply to a failure. `Retry-After` (and `-ms`) answer
/// the failure itself; rate-limit reset headers and "try again in" phrases
/// describe quotas and are sent on every response, so they count only for a
/// rate limit. A zero wait falls back to computed backoff, as the official
/// SDKs do: resending at once, ten times over, helps no one.
fn named_wait_for(kind: RetryableKind, mut hint: ServerHint) -> ServerHint {
    hint.wait = hint.wait.filter(|wait| {
        let answers_failure = matches!(
            wait.source,
            WaitSource::RetryAfterMs | WaitSource::RetryAfterSeconds | WaitSource::RetryAfterDate
        );
        (answers_failure || kind == RetryableKind::RateLimited)
            && wait.duration >= Duration::from_millis(1)
    });
    hint
}

fn status_of(outcome: &Outcome<'_>) -> Option<StatusCode> {
    match outcome {
        Outcome::Response { status, .. } => Some(*status),
        Outcome::Error(_) => None,
    }
}

/// The stream guard's verdict carried by an error outcome, if any: an
/// error event before content, i.e. a provider's answer, not a transport failure.
fn pre_content<'a>(outcome: &Outcome<'a>) -> Option<&'a PreContentError> {
    let Outcome::Error(error) = *outcome else {
        return None;
    };
    std::iter::successors(Some(error), |&e| e.source())
        .take(32)
        .find_map(|e| e.downcast_ref::<PreContentError>())
}

fn ceil_millis(d: Duration) -> Duration {
    let millis = d.as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX))
}

impl From<Refusal> for StopReason {
    fn from(refusal: Refusal) -> StopReason {
        match refusal {
            Refusal::Retries { max_retries } => StopReason::RetriesExhausted { max_retries },
            Refusal::ServerWait { asked, limit } => StopReason::ServerWaitTooLong { asked, limit },
            Refusal::Deadline {
                elapsed,
                wait,
                limit,
            } => StopReason::DeadlineReached {
                elapsed,
                wait,
                limit,
            },
        }
    }
}

#[cfg(test)]
#[path = "judge_tests.rs"]
mod tests;
