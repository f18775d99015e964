//! One request through a failover: rounds over the targets, monotonic
//! accounting across them, and the eligibility check between rounds.

use super::config::{Config, UNNAMED_ROUND_WAIT};
use super::error::{FailoverError, FailoverErrorKind};
use super::report::{
    AttemptOutcome, FailoverReport, FailoverStop, SkipReason, Suppression, TargetAttempt,
};
use super::target::Target;
use crate::error::{BoxError, RetryError};
use crate::hint::request_window;
use crate::observe;
use crate::policy::{Outcome, RetryState};
use crate::report::RetryReport;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use rand::Rng;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tower::{Service, ServiceExt};

/// The state of one request, monotonic across rounds: sends, attempts,
/// the report, and what the last rejection was.
pub(super) struct Operation<S, ResBody> {
    targets: Arc<[Target<S>]>,
    config: Arc<Config>,
    started: Instant,
    deadline: Option<Instant>,
    sends_left: u32,
    report: FailoverReport,
    /// Per target, when its provider said it takes requests again.
    ready_at: Vec<Option<Instant>>,
    /// The last certified rejection that came as an answer: what an
    /// exhausted request hands over.
    last_answer: Option<Response<ResBody>>,
    /// The last certified rejection that came as an error, for when no
    /// answer came at all.
    last_error: Option<BoxError>,
    /// The quickest attempt so far: what one more attempt is expected to take.
    fastest: Option<Duration>,
}

/// How a round ended.
enum RoundEnd<ResBody> {
    /// A target's answer or failure ends the request.
    Final(Result<Response<ResBody>, BoxError>),
    /// Every target turned the request away (or was skipped); `ambiguous`
    /// when an attempt may have been executed (a first-content timeout).
    Exhausted { ambiguous: bool },
}

impl<S, ResBody> Operation<S, ResBody>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    ResBody: Send + 'static,
{
    pub(super) fn new(targets: Arc<[Target<S>]>, config: Arc<Config>) -> Self {
        let started = Instant::now();
        Operation {
            deadline: config.deadline.and_then(|d| started.checked_add(d)),
            sends_left: config.max_upstream_sends,
            ready_at: vec![None; targets.len()],
            targets,
            config,
            started,
            report: FailoverReport::new(),
            last_answer: None,
            last_error: None,
            fastest: None,
        }
    }

    pub(super) async fn run<B>(mut self, request: Request<B>) -> Result<Response<ResBody>, BoxError>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let (parts, body) = request.into_parts();
        let body = match collect(body, self.config.max_body, self.deadline).await {
            Ok(body) => body,
            Err((kind, source)) => return Err(self.error(kind, source)),
        };
        let bound = self
            .config
            .state_bound
            .as_ref()
            .is_some_and(|bound| bound(&parts, &body));
        loop {
            match self.round(&parts, &body, bound).await {
                RoundEnd::Final(result) => return result,
                RoundEnd::Exhausted { ambiguous } => {
                    if let Err(suppression) = self.next_round(bound, ambiguous).await {
                        observe::failover_suppressed(suppression.label());
                        self.report.suppressed = Some(suppression);
                        return self.exhausted();
                    }
                    self.report.rounds += 1;
                }
            }
        }
    }

    /// One pass over the targets, in order.
    async fn round(&mut self, parts: &Parts, body: &Bytes, bound: bool) -> RoundEnd<ResBody> {
        let round = self.report.rounds;
        let mut attempted = 0;
        let mut ambiguous = false;
        for index in 0..self.targets.len() {
            let target = self.targets[index].clone();
            let now = Instant::now();
            let skip = if bound && index > 0 {
                Some(SkipReason::StateBound)
            } else if attempted >= self.config.max_target_attempts {
                Some(SkipReason::AttemptLimit)
            } else if self.deadline.is_some_and(|deadline| now >= deadline) {
                Some(SkipReason::Deadline)
            } else if self.cooling(index, &target, now) {
                Some(SkipReason::CoolingDown)
            } else if self.sends_left < target.max_sends {
                Some(SkipReason::SendBudget)
            } else {
                None
            };
            if let Some(reason) = skip {
                self.record(&target, AttemptOutcome::Skipped(reason));
                continue;
            }
            attempted += 1;
            observe::failover_attempt(round);
            let mut request_parts = parts.clone();
            let mut request_body = body.clone();
            if let Some(rewrite) = &target.rewrite {
                if let Err(error) = rewrite(&mut request_parts, &mut request_body) {
                    return RoundEnd::Final(Err(
                        self.error(FailoverErrorKind::Rewrite, Some(error))
                    ));
                }
            }
            let request = Request::from_parts(request_parts, Full::new(request_body));
            let sent_at = Instant::now();
            let call = target.service.clone().oneshot(request);
            let limit = [
                self.deadline,
                target
                    .first_content_timeout
                    .and_then(|t| sent_at.checked_add(t)),
            ]
            .into_iter()
            .flatten()
            .min();
            let result = match limit {
                Some(limit) => match tokio::time::timeout_at(limit, call).await {
                    Ok(result) => Some(result.map_err(Into::into)),
                    Err(_) => None,
                },
                None => Some(call.await.map_err(Into::into)),
            };
            let took = sent_at.elapsed();
            self.fastest = Some(self.fastest.map_or(took, |fastest| fastest.min(took)));
            let Some(result) = result else {
                // Timed out: it may have been sent and executed.
                self.spend(target.max_sends);
                if self
                    .deadline
                    .is_some_and(|deadline| Instant::now() >= deadline)
                {
                    self.record(&target, AttemptOutcome::Failed);
                    return RoundEnd::Final(Err(self.error(FailoverErrorKind::Deadline, None)));
                }
                self.record(&target, AttemptOutcome::FirstContentTimeout);
                ambiguous = true;
                continue;
            };
            match self.judge(index, &target, result, sent_at) {
                Ok(()) => {}
                Err(end) => return end,
            }
        }
        RoundEnd::Exhausted { ambiguous }
    }

    /// Reads one target's outcome: a certified rejection is noted (and the
    /// round goes on), anything else ends the request.
    fn judge(
        &mut self,
        index: usize,
        target: &Target<S>,
        result: Result<Response<ResBody>, BoxError>,
        sent_at: Instant,
    ) -> Result<(), RoundEnd<ResBody>> {
        let state = RetryState::new();
        let elapsed = self.started.elapsed();
        let config = Arc::clone(&self.config);
        let policy = &config.policy;
        match result {
            Ok(mut response) => {
                let sends = response
                    .extensions()
                    .get::<RetryReport>()
                    .map_or(1, |r| r.attempts);
                self.spend(sends);
                let judgement = policy.judge(
                    &state,
                    Outcome::Response {
                        status: response.status(),
                        headers: response.headers(),
                        body: None,
                    },
                    elapsed,
                );
                match judgement.rejection {
                    Some(rejection) => {
                        self.rejected(index, target, rejection.wait, sent_at);
                        self.record(target, AttemptOutcome::Rejected(rejection));
                        self.last_answer = Some(response);
                        Ok(())
                    }
                    None => {
                        if let Some(window) = request_window(response.headers(), SystemTime::now())
                        {
                            if let (0, Some(cooldown)) = (window.remaining, &target.cooldown) {
                                cooldown.extend(Instant::now() + window.reset_in);
                            }
                        }
                        self.record(target, AttemptOutcome::Answered(response.status()));
                        if self.report.rounds > 1 {
                            observe::failover_round_served();
                        }
                        self.report.stop = FailoverStop::Answered;
                        response.extensions_mut().insert(self.report.clone());
                        Err(RoundEnd::Final(Ok(response)))
                    }
                }
            }
            Err(error) => {
                let judgement = policy.judge(&state, Outcome::Error(&*error), elapsed);
                let sends = match error.downcast_ref::<RetryError>() {
                    Some(retry) => retry.report().attempts,
                    None if judgement.reached_upstream
                        && judgement.rejection.is_none_or(|r| {
                            !matches!(r.kind, crate::policy::RejectionKind::NotConnected)
                        }) =>
                    {
                        1
                    }
                    None => 0,
                };
                self.spend(sends);
                match judgement.rejection {
                    Some(rejection) => {
                        self.rejected(index, target, rejection.wait, sent_at);
                        self.record(target, AttemptOutcome::Rejected(rejection));
                        self.last_error = Some(error);
                        Ok(())
                    }
                    None => {
                        self.record(target, AttemptOutcome::Failed);
                        Err(RoundEnd::Final(Err(
                            self.error(FailoverErrorKind::Failed, Some(error))
                        )))
                    }
                }
            }
        }
    }

    /// Notes a certified rejection's wait for this request (and for every
    /// request, when the target cools down).
    fn rejected(
        &mut self,
        index: usize,
        target: &Target<S>,
        wait: Option<Duration>,
        sent_at: Instant,
    ) {
        let now = Instant::now();
        let ready = match wait {
            Some(wait) => now.checked_add(wait),
            None => sent_at
                .checked_add(UNNAMED_ROUND_WAIT)
                .map(|at| at.max(now)),
        };
        self.ready_at[index] = ready;
        if let (Some(wait), Some(cooldown)) = (wait, &target.cooldown) {
            if let Some(until) = now.checked_add(wait) {
                cooldown.extend(until);
            }
        }
    }

    /// Whether the target is still inside a wait its provider named: for
    /// this request (from an earlier round) or for every request.
    fn cooling(&self, index: usize, target: &Target<S>, now: Instant) -> bool {
        let own = self.report.rounds > 1 && self.ready_at[index].is_some_and(|at| at > now);
        own || target
            .cooldown
            .as_ref()
            .is_some_and(|c| c.until(now).is_some())
    }

    fn spend(&mut self, sends: u32) {
        self.report.upstream_sends = self.report.upstream_sends.saturating_add(sends);
        self.sends_left = self.sends_left.saturating_sub(sends);
    }

    fn record(&mut self, target: &Target<S>, outcome: AttemptOutcome) {
        self.report.attempts.push(TargetAttempt {
            target: Arc::clone(&target.name),
            round: self.report.rounds,
            outcome,
        });
    }

    /// When the next target will take the request again: the soonest end
    /// of a wait named in this request or of a target's cooldown.
    fn soonest_ready(&self, now: Instant) -> Instant {
        self.targets
            .iter()
            .zip(&self.ready_at)
            .map(|(target, ready)| {
                let cooldown = target.cooldown.as_ref().and_then(|c| c.until(now));
                match (ready, cooldown) {
                    (Some(a), Some(b)) => (*a).max(b),
                    (Some(a), None) => *a,
                    (None, Some(b)) => b,
                    (None, None) => now + UNNAMED_ROUND_WAIT,
                }
            })
            .min()
            .unwrap_or(now)
    }

    /// Whether another round may begin, and the wait before it, checked
    /// again at the moment it would begin.
    async fn next_round(&mut self, bound: bool, ambiguous: bool) -> Result<(), Suppression> {
        let Some(retry) = self.config.exhaustion_retry else {
            return Err(Suppression::Disabled);
        };
        if self.report.rounds > retry.max_rounds {
            return Err(Suppression::RoundsSpent);
        }
        if bound {
            return Err(Suppression::StateBound);
        }
        if ambiguous {
            return Err(Suppression::Ambiguous);
        }
        let config = Arc::clone(&self.config);
        let shutdown = &config.shutdown;
        if shutdown.is_started() {
            return Err(Suppression::Shutdown);
        }
        let smallest = self.targets.iter().map(|t| t.max_sends).min().unwrap_or(1);
        if self.sends_left < smallest {
            return Err(Suppression::SendBudget);
        }
        let now = Instant::now();
        let asked = self.soonest_ready(now).saturating_duration_since(now);
        if asked > retry.max_wait {
            return Err(Suppression::WaitTooLong {
                asked,
                limit: retry.max_wait,
            });
        }
        // Spread the waiters (a fifth of the wait, at least 50 ms), never
        // before the named wait and never past the longest wait.
        let spread = (asked / 5)
            .max(Duration::from_millis(50))
            .min(retry.max_wait - asked);
        let wait = asked + spread.mul_f64(rand::rng().random::<f64>());
        let attempt = self.fastest.unwrap_or_default();
        if self
            .deadline
            .is_some_and(|deadline| now + wait + attempt >= deadline)
        {
            return Err(Suppression::Deadline);
        }
        let Some(_admitted) = Admitted::new(&config) else {
            return Err(Suppression::AdmissionFull);
        };
        observe::failover_wait(wait);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shutdown.started() => return Err(Suppression::Shutdown),
        }
        self.report.waited += wait;
        // The linearization point: nothing may have changed the verdict.
        if shutdown.is_started() {
            return Err(Suppression::Shutdown);
        }
        Ok(())
    }

    /// Every allowed round ended with every target turning the request
    /// away: the last rejection, marked so the caller does not retry it
    /// at once.
    fn exhausted(mut self) -> Result<Response<ResBody>, BoxError> {
        observe::failover_exhausted();
        self.report.stop = FailoverStop::Exhausted;
        let now = Instant::now();
        let named = self
            .ready_at
            .iter()
            .flatten()
            .copied()
            .chain(
                self.targets
                    .iter()
                    .filter_map(|t| t.cooldown.as_ref()?.until(now)),
            )
            .min();
        match self.last_answer.take() {
            Some(mut response) => {
                let headers = response.headers_mut();
                headers.insert("x-should-retry", HeaderValue::from_static("false"));
                if let Some(at) = named {
                    let left = at.saturating_duration_since(now);
                    let millis = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
                    headers.insert("retry-after", HeaderValue::from(millis.div_ceil(1000)));
                    headers.insert("retry-after-ms", HeaderValue::from(millis));
                }
                response.extensions_mut().insert(self.report.clone());
                Ok(response)
            }
            None => {
                let source = self.last_error.take();
                Err(self.error(FailoverErrorKind::Exhausted, source))
            }
        }
    }

    fn error(&mut self, kind: FailoverErrorKind, source: Option<BoxError>) -> BoxError {
        if matches!(kind, FailoverErrorKind::Failed) {
            self.report.stop = FailoverStop::Failed;
        } else if matches!(kind, FailoverErrorKind::Exhausted) {
            self.report.stop = FailoverStop::Exhausted;
        } else {
            self.report.stop = FailoverStop::Failed;
        }
        Box::new(FailoverError::new(kind, self.report.clone(), source))
    }
}

/// A place among the requests waiting for a further round, given back
/// when the wait ends or the request is dropped.
struct Admitted<'a>(&'a Config);

impl<'a> Admitted<'a> {
    fn new(config: &'a Config) -> Option<Admitted<'a>> {
        let before = config.waiting_rounds.fetch_add(1, Ordering::SeqCst);
        if before >= config.max_waiting_rounds {
            config.waiting_rounds.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Admitted(config))
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.waiting_rounds.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The whole request body, within the cap and the deadline: every
/// attempt gets a fresh copy of it.
async fn collect<B>(
    body: B,
    cap: usize,
    deadline: Option<Instant>,
) -> Result<Bytes, (FailoverErrorKind, Option<BoxError>)>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let collect = Limited::new(body, cap).collect();
    let collected = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline, collect).await {
            Ok(collected) => collected,
            Err(_) => return Err((FailoverErrorKind::Deadline, None)),
        },
        None => collect.await,
    };
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => {
            Err((FailoverErrorKind::BodyTooLarge { cap }, None))
        }
        Err(error) => Err((FailoverErrorKind::BodyFailed, Some(error))),
    }
}
