//! One attempt's outcome → accept, stop, or retry after a delay.

use super::{Recovery, Rejection, RejectionKind, RetryPolicy, RetryState};
use crate::backoff::spread_server_wait;
use crate::budget::Refusal;
use crate::classify::{
    classify_error, classify_status, find_reported, should_retry_header, with_should_retry,
    Classification, FatalKind, ProviderError, RetryableKind,
};
use crate::hint::{
    named_wait, stated_quotas, token_quota_only, ServerHint, ServerWait, Signals, WaitSource,
};
use crate::rate_limit::link::GateWait;
use crate::rate_limit::KeyNews;
use crate::report::StopReason;
use http::{HeaderMap, StatusCode};
use std::error::Error;
use std::time::Duration;

/// What an attempt produced.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome<'a> {
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
pub(crate) enum Decision {
    /// The outcome is a success: hand it to the caller.
    Accept,
    /// Send again after `delay`.
    Retry {
        /// How long to sleep first.
        delay: Duration,
        /// The server-named wait the delay honours, if any.
        server_wait: Option<ServerWait>,
        /// Whose wait it is: a rate limit's named wait belongs to the whole
        /// key, and a rate-limit gate under the retry layer holds every
        /// send to the key for it.
        scope: WaitScope,
        /// Whether the resend is charged to the shared retry budget. A rate
        /// limit's resend that waits in a gate pacing its key is not: the
        /// gate sends no faster than the key was found to admit.
        charged: bool,
        /// Whether the resend waits out `delay` in a rate-limit gate's queue
        /// under the retry layer (the gate holds the key for it, or meters
        /// the overloaded key's sends in flight) instead of sleeping first.
        in_gate: bool,
    },
    /// Change the request and send it again at once.
    Recover(Recovery),
    /// Hand the outcome to the caller as final.
    Stop(StopReason),
}

/// Whose wait a [`Decision::Retry`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum WaitScope {
    /// This request's alone (computed backoff, an overload's or a 5xx's wait).
    Request,
    /// The key's: the provider named it for its rate limit.
    Key,
}

/// The policy's reading of one outcome and its decision.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub(crate) struct Judgement {
    /// How the outcome was classified.
    pub class: Classification,
    /// The provider error in the body, if one was read.
    pub provider: Option<ProviderError>,
    /// What the server said about retrying.
    pub hint: ServerHint,
    /// What the outcome says about the key. The gate takes it from the
    /// [`Reading`]; the judge's tests read it here.
    #[cfg_attr(not(test), allow(dead_code))]
    pub key: KeyNews,
    /// Whether the attempt reached the upstream (a send the gate refused
    /// did not, and is not counted as one).
    pub reached_upstream: bool,
    /// Whether the outcome proves the request was not executed, whatever
    /// the server said about retrying it: what a failover may act on.
    pub rejection: Option<Rejection>,
    /// What to do next.
    pub decision: Decision,
}

/// What an outcome shows, whatever carried it: a response's status line, or
/// a stream's first event with the head it came with, or a local error.
struct Evidence<'a> {
    /// The outcome's own class, before the server's `x-should-retry`.
    base: Classification,
    /// The class with that verdict applied: what the request acts on.
    class: Classification,
    /// `x-should-retry` on the head, when a failure came with one.
    should_retry: Option<bool>,
    provider: Option<ProviderError>,
    /// The head's headers, when a response arrived.
    headers: Option<&'a HeaderMap>,
    body: Option<&'a [u8]>,
    /// The provider answered (a status or an error event), as opposed to a
    /// transport failure or a local refusal.
    answered: bool,
    /// A wait the error named itself (the gate's hold).
    own_wait: Option<Duration>,
    reached_upstream: bool,
    /// The answer had begun before the failure (a stream's events before
    /// its error event).
    may_have_executed: bool,
}

/// An outcome read, before any decision: what it shows, what it tells a
/// gate about the key, and whether it proves the request was not executed.
pub(crate) struct Reading<'a> {
    evidence: Evidence<'a>,
    /// The wait the server named for the outcome's class.
    wait: Option<ServerWait>,
    /// What the outcome says about the key, for a rate-limit gate.
    pub(crate) key: KeyNews,
    /// The outcome as a rejection, when it proves the request was not
    /// executed: what a failover acts on.
    pub(crate) rejection: Option<Rejection>,
}

impl Reading<'_> {
    /// Whether the outcome is a success: accepted whatever else holds.
    pub(crate) fn is_success(&self) -> bool {
        self.evidence.class == Classification::Success
    }

    /// Whether the attempt reached the upstream.
    pub(crate) fn reached_upstream(&self) -> bool {
        self.evidence.reached_upstream
    }
}

impl<'a> Evidence<'a> {
    /// A success answered with `headers`, its body unread.
    fn served(headers: &'a HeaderMap) -> Evidence<'a> {
        Evidence {
            base: Classification::Success,
            class: Classification::Success,
            should_retry: None,
            provider: None,
            headers: Some(headers),
            body: None,
            answered: true,
            own_wait: None,
            reached_upstream: true,
            may_have_executed: false,
        }
    }
}

impl RetryPolicy {
    /// Judges an attempt's outcome for a request whose account is `state`
    /// (with the attempt already counted), `elapsed` after its first send.
    ///
    /// This is the one place an outcome is given a meaning: the retry
    /// layer, the rate-limit gate and the `tower::retry` path all act on the
    /// [`Judgement`] it returns.
    #[cfg(test)]
    pub(crate) fn judge(
        &self,
        state: &RetryState,
        outcome: Outcome<'_>,
        elapsed: Duration,
    ) -> Judgement {
        self.decide(state, self.read(state, outcome), elapsed)
    }

    /// The first half of [`judge`](Self::judge): what the outcome shows,
    /// with no decision drawn. What it says about the key is decided here,
    /// from what the gate made of the send (`state`): whether it is news
    /// about the rate or only about tokens, and whether a named wait is the
    /// key's or the request's.
    pub(crate) fn read<'a>(&self, state: &RetryState, outcome: Outcome<'a>) -> Reading<'a> {
        // A success is final whatever its headers say (see `evidence`): the
        // common answer, unread, is read without the evidence of a failure.
        if let Outcome::Response {
            status,
            headers,
            body: None,
        } = outcome
        {
            if classify_status(status, None) == Classification::Success {
                let stated = Some(headers).filter(|_| state.gate().is_some());
                return Reading {
                    evidence: Evidence::served(headers),
                    wait: None,
                    key: self.served_news(stated),
                    rejection: None,
                };
            }
        }
        let evidence = self.evidence(outcome);
        let wait = match &evidence.class {
            Classification::Retryable(kind) => self.named_wait(*kind, &evidence),
            _ => None,
        };
        // What the outcome says about the key is its own class's news, not
        // the request's: a rate limit the server forbids retrying still
        // tells every other request the key's wait.
        // Only a send a gate took needs its quota headers read.
        let gate = state.gate();
        let stated = evidence.headers.filter(|_| gate.is_some());
        let key = match &evidence.base {
            _ if !evidence.reached_upstream => KeyNews::None,
            Classification::Success => self.served_news(stated),
            Classification::Retryable(RetryableKind::RateLimited) => {
                let wait = match evidence.class {
                    Classification::Retryable(_) => wait,
                    _ => self.named_wait(RetryableKind::RateLimited, &evidence),
                };
                let (window, tokens) = stated.map_or((None, None), |headers| {
                    stated_quotas(headers, || self.now())
                });
                // A token quota refused the send: the headers say only its
                // tokens ran out, or fewer are left than the send booked.
                let booked = gate.map_or(0, |gate| gate.booked_tokens);
                let short_of_tokens = booked > 0 && tokens.is_some_and(|t| t.remaining < booked);
                let rate = !evidence.headers.is_some_and(token_quota_only) && !short_of_tokens;
                KeyNews::Throttled {
                    wait: wait.map(|w| w.duration),
                    rate,
                    // A send that booked its tokens, refused for tokens,
                    // holds only its request (see `KeyNews`).
                    holds_key: rate || booked == 0,
                    whole_seconds: wait.is_some_and(|w| w.whole_seconds),
                    window,
                    tokens,
                    final_answer: evidence.should_retry == Some(false),
                }
            }
            // Too much of ours in flight at once: a concurrency signal,
            // not a rate signal.
            Classification::Retryable(RetryableKind::Overloaded) => KeyNews::Overloaded,
            _ => KeyNews::None,
        };
        let rejection = self.rejection(&evidence);
        Reading {
            evidence,
            wait,
            key,
            rejection,
        }
    }

    /// The second half of [`judge`](Self::judge): what to do about an
    /// outcome read, after the gate (if one took the send) acted on its
    /// news (`state`).
    pub(crate) fn decide(
        &self,
        state: &RetryState,
        reading: Reading<'_>,
        elapsed: Duration,
    ) -> Judgement {
        let Reading {
            evidence,
            wait,
            key,
            rejection,
        } = reading;
        let should_retry = evidence.should_retry;
        let hint = ServerHint { should_retry, wait };
        let decision = match &evidence.class {
            Classification::Success => Decision::Accept,
            Classification::Fatal(FatalKind::ContextOverflow(overflow)) => {
                self.on_context_overflow(state, overflow, elapsed)
            }
            Classification::Fatal(FatalKind::Unauthorized) => self.on_unauthorized(state, elapsed),
            Classification::Fatal(kind) => Decision::Stop(StopReason::NotRetryable(kind.clone())),
            Classification::Retryable(kind) => {
                if self.left_to_gateway(*kind, &evidence, should_retry) {
                    Decision::Stop(StopReason::LeftToGateway)
                } else if let Some(decision) = (*kind == RetryableKind::Overloaded)
                    .then(|| self.on_overload_streak(state, elapsed))
                    .flatten()
                {
                    decision
                } else {
                    self.plan_retry(state, &evidence, *kind, wait, elapsed)
                        .unwrap_or_else(|refusal| Decision::Stop(refusal.into()))
                }
            }
        };
        Judgement {
            class: evidence.class,
            provider: evidence.provider,
            hint,
            key,
            reached_upstream: evidence.reached_upstream,
            rejection,
            decision,
        }
    }

    /// What a served send tells its key: the quota its answer's headers
    /// state (read only for a send a gate took).
    fn served_news(&self, stated: Option<&HeaderMap>) -> KeyNews {
        let (window, tokens) = stated.map_or((None, None), |headers| {
            stated_quotas(headers, || self.now())
        });
        KeyNews::Served {
            window,
            // A token quota is news only beside a request window, as
            // providers state them.
            tokens: tokens.filter(|_| window.is_some()),
        }
    }

    /// The outcome's own class (before `x-should-retry`) as a
    /// [`Rejection`], when it proves the request was not executed.
    fn rejection(&self, evidence: &Evidence<'_>) -> Option<Rejection> {
        let wait = |kind| self.named_wait(kind, evidence).map(|w| w.duration);
        let kind = match evidence.base {
            _ if evidence.may_have_executed => return None,
            _ if !evidence.reached_upstream => {
                return Some(Rejection {
                    kind: RejectionKind::NotSent,
                    wait: evidence.own_wait,
                })
            }
            Classification::Retryable(RetryableKind::RateLimited) if evidence.answered => {
                (RejectionKind::RateLimited, RetryableKind::RateLimited)
            }
            Classification::Retryable(RetryableKind::Overloaded) if evidence.answered => {
                (RejectionKind::Overloaded, RetryableKind::Overloaded)
            }
            Classification::Retryable(RetryableKind::Connect) if evidence.headers.is_none() => {
                return Some(Rejection {
                    kind: RejectionKind::NotConnected,
                    wait: None,
                })
            }
            _ => return None,
        };
        Some(Rejection {
            kind: kind.0,
            wait: wait(kind.1),
        })
    }

    /// Reads what an outcome shows. A failure reported by one of the
    /// library's layers (a stream's first event) is judged with the head it
    /// came with, exactly as a failed status would be.
    fn evidence<'a>(&self, outcome: Outcome<'a>) -> Evidence<'a> {
        match outcome {
            Outcome::Response {
                status,
                headers,
                body,
            } => {
                let provider = body.and_then(ProviderError::parse);
                let base = classify_status(status, provider.as_ref());
                // A success is final whatever its headers say: read none.
                let should_retry = match base {
                    Classification::Success => None,
                    _ => should_retry_header(headers),
                };
                Evidence {
                    class: with_should_retry(base.clone(), should_retry, status),
                    base,
                    should_retry,
                    provider,
                    headers: Some(headers),
                    body,
                    answered: true,
                    own_wait: None,
                    reached_upstream: true,
                    may_have_executed: false,
                }
            }
            Outcome::Error(error) => match find_reported(error, &self.config.known_errors) {
                Some(reported) => {
                    let head = reported.response_head();
                    let base = reported.classification();
                    let should_retry = head.and_then(|(_, headers)| should_retry_header(headers));
                    let class = match head {
                        Some((status, _)) => with_should_retry(base.clone(), should_retry, status),
                        None => base.clone(),
                    };
                    Evidence {
                        base,
                        class,
                        should_retry,
                        provider: reported.provider_error().cloned(),
                        headers: head.map(|(_, headers)| headers),
                        // An error event's message is its body: a "try
                        // again in …" there counts as in a failed response's.
                        body: reported
                            .provider_error()
                            .and_then(|p| p.message.as_deref())
                            .map(str::as_bytes),
                        answered: head.is_some(),
                        own_wait: reported.named_wait(),
                        reached_upstream: reported.reached_upstream(),
                        may_have_executed: reported.may_have_executed(),
                    }
                }
                None => {
                    let class = classify_error(error);
                    Evidence {
                        base: class.clone(),
                        class,
                        should_retry: None,
                        provider: None,
                        headers: None,
                        body: None,
                        answered: false,
                        own_wait: None,
                        reached_upstream: true,
                        may_have_executed: false,
                    }
                }
            },
        }
    }

    /// The wait the server named for a failure of this kind. `Retry-After`
    /// (and `-ms`) answer the failure itself; rate-limit reset headers and
    /// "try again in" phrases describe quotas and are sent on every
    /// response, so they count only for a rate limit. A zero wait falls
    /// back to computed backoff, as the official SDKs do: resending at
    /// once, ten times over, helps no one.
    fn named_wait(&self, kind: RetryableKind, evidence: &Evidence<'_>) -> Option<ServerWait> {
        let signals = match kind {
            RetryableKind::RateLimited => Signals::All,
            _ => Signals::RetryAfter,
        };
        let own = evidence.own_wait.map(|duration| ServerWait {
            duration,
            source: WaitSource::KeyHold,
            whole_seconds: false,
        });
        let named = evidence
            .headers
            .and_then(|headers| named_wait(headers, evidence.body, self.now(), signals));
        own.into_iter()
            .chain(named)
            .filter(|wait| wait.duration >= Duration::from_millis(1))
            .max_by_key(|wait| wait.duration)
    }

    /// Behind a gateway, a provider's rate limit, overload or 5xx is the
    /// gateway's to retry, unless it says `x-should-retry: true`. 408 and
    /// 409 are not backpressure and are retried; so are transport failures.
    fn left_to_gateway(
        &self,
        kind: RetryableKind,
        evidence: &Evidence<'_>,
        should_retry: Option<bool>,
    ) -> bool {
        let backpressure = match kind {
            RetryableKind::RateLimited | RetryableKind::Overloaded => true,
            RetryableKind::Status(status) => status.is_server_error(),
            _ => false,
        };
        self.behind_gateway() && evidence.answered && backpressure && should_retry != Some(true)
    }

    fn plan_retry(
        &self,
        state: &RetryState,
        evidence: &Evidence<'_>,
        kind: RetryableKind,
        server_wait: Option<ServerWait>,
        elapsed: Duration,
    ) -> Result<Decision, Refusal> {
        let reached_upstream = evidence.reached_upstream;
        let rate_limited = kind == RetryableKind::RateLimited;
        let scope = match server_wait {
            Some(_) if rate_limited => WaitScope::Key,
            _ => WaitScope::Request,
        };
        // A rate limit's resend waiting in a gate that paces its key is not
        // charged: the gate sends no faster than the key was found to admit.
        let charged = !(rate_limited && state.gate_paced());
        // Where the resend waits: in the gate's queue when the gate holds
        // the key for this wait and paces its release (the resend keeps its
        // place ahead of the sends that arrive during the hold), or when an
        // overloaded key's in-flight ceiling meters a resend with no named
        // wait (it waits for a slot instead of a backoff).
        let in_gate = match state.gate().map(|gate| gate.wait) {
            Some(GateWait::KeyHeld) => scope == WaitScope::Key && state.gate_paced(),
            Some(GateWait::SlotMetered) => server_wait.is_none(),
            _ => false,
        };
        let limits = state.limits(self.limits());
        // The judged attempt is counted in `state` (a fresh state, as a
        // caller outside the layers passes, is the first send); a send
        // refused before it left is not one, and asks for the same resend.
        let sent = match reached_upstream {
            true => state.attempts().max(1),
            false => state.attempts().saturating_sub(1),
        };
        limits.admit_retry(sent)?;
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
        Ok(Decision::Retry {
            delay,
            server_wait,
            scope,
            charged,
            in_gate,
        })
    }
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
