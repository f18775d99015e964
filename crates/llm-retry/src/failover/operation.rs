//! One request through a failover: rounds over the targets, monotonic
//! accounting across them, and the eligibility check between rounds.

use super::body::FailoverBody;
use super::config::{Config, MAX_COOLDOWN, UNNAMED_ROUND_WAIT};
use super::error::FailoverError;
use super::overload::{self, Shape};
use super::report::{
    AttemptOutcome, FailoverReport, FailoverStop, SkipReason, Suppression, TargetAttempt,
};
use super::target::{ModelTag, Target};
use crate::deadline::Deadline;
use crate::error::{BoxError, RetryError};
use crate::hint::request_window;
use crate::observe;
use crate::policy::{Outcome, Rejection, RejectionKind, RetryState};
use crate::report::RetryReport;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tower::{Service, ServiceExt};

/// How much of a rejection's body is kept to hand over at the end.
const KEPT_BODY: usize = 64 << 10;
/// How long reading a rejection's body may take.
const KEPT_BODY_TIME: Duration = Duration::from_secs(1);

/// When a target takes requests again, as this request learned it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ready {
    pub(super) at: Instant,
    /// Its provider named the wait (else it is the default pause).
    pub(super) named: bool,
    /// A rate limit named it (else an overload or a refusal).
    pub(super) rate_limited: bool,
}

/// The state of one request, monotonic across rounds: sends, attempts,
/// the report, and the last rejection.
pub(super) struct Operation<S> {
    targets: Arc<[Target<S>]>,
    config: Arc<Config>,
    deadline: Option<Instant>,
    sends_left: u32,
    report: FailoverReport,
    /// Per target, when it takes requests again, once it turned this one away.
    ready: Vec<Option<Ready>>,
    /// The last rejection that came as an answer, its body read, and the
    /// target that sent it: what an exhausted request hands over.
    last_answer: Option<(Arc<str>, Response<Bytes>)>,
    /// The last rejection that came as an error, for when no answer came.
    last_error: Option<BoxError>,
    /// The slowest attempt so far: what one more attempt may take.
    slowest: Duration,
    /// The model the request names: what the targets' cooldowns are kept for.
    model: ModelTag,
}

/// How a round ended.
enum RoundEnd<ResBody> {
    /// A target's answer or failure ends the request.
    Final(Result<Response<FailoverBody<ResBody>>, BoxError>),
    /// Every target turned the request away or was skipped.
    Exhausted {
        /// An attempt may have been executed (a first-content timeout).
        ambiguous: bool,
        /// An attempt was turned away for another reason than a rate limit
        /// or an overload (a connection never made, a local refusal).
        not_throttled: bool,
    },
}

/// What one target's outcome means for the request.
enum Verdict {
    /// Turned away before execution: on to the next target.
    Rejected(Rejection),
    /// Anything else: the request ends with it.
    Final,
}

impl<S> Operation<S> {
    pub(super) fn new(targets: Arc<[Target<S>]>, config: Arc<Config>) -> Self {
        Operation {
            deadline: config.deadline.and_then(|d| Instant::now().checked_add(d)),
            sends_left: config.max_upstream_sends,
            ready: vec![None; targets.len()],
            targets,
            config,
            report: FailoverReport::new(),
            last_answer: None,
            last_error: None,
            slowest: Duration::ZERO,
            model: ModelTag::default(),
        }
    }

    pub(super) async fn run<B, ResBody>(
        mut self,
        request: Request<B>,
    ) -> Result<Response<FailoverBody<ResBody>>, BoxError>
    where
        S: Service<Request<Full<Bytes>>, Response = Response<ResBody>>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send,
        S::Error: Into<BoxError>,
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
        ResBody: Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Into<BoxError>,
    {
        let (mut parts, body) = request.into_parts();
        let body = match collect(body, self.config.max_body, self.deadline).await {
            Ok(body) => body,
            Err((stop, source)) => return Err(self.error(stop, source)),
        };
        // Read only where a target keeps a cooldown, the one thing it keys.
        if self.targets.iter().any(|target| target.cooldown.is_some()) {
            self.model = ModelTag::of(&body);
        }
        // A target's retry stack waits and resends only within what the
        // failover has left: a named wait that would outlast it ends the
        // target's attempt at once, and the request moves on.
        if let Some(deadline) = self.deadline {
            parts.extensions.insert(Deadline(deadline));
        }
        let bound = self
            .config
            .state_bound
            .as_ref()
            .is_some_and(|bound| bound(&parts, &body));
        loop {
            match self.round(&parts, &body, bound).await {
                RoundEnd::Final(result) => return result,
                RoundEnd::Exhausted {
                    ambiguous,
                    not_throttled,
                } => {
                    if let Err(suppression) = self.next_round(bound, ambiguous, not_throttled).await
                    {
                        return self.take_exhausted(suppression);
                    }
                    self.report.rounds += 1;
                }
            }
        }
    }

    /// One pass over the targets, in order.
    async fn round<ResBody>(
        &mut self,
        parts: &Parts,
        body: &Bytes,
        bound: bool,
    ) -> RoundEnd<ResBody>
    where
        S: Service<Request<Full<Bytes>>, Response = Response<ResBody>>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send,
        S::Error: Into<BoxError>,
        ResBody: Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Into<BoxError>,
    {
        let round = self.report.rounds;
        let mut attempted = 0;
        let (mut ambiguous, mut not_throttled) = (false, false);
        // The targets by reference: a clone of one would clone its whole
        // service stack, once more than the call's own clone.
        let targets = Arc::clone(&self.targets);
        for (index, target) in targets.iter().enumerate() {
            let now = Instant::now();
            let skip = if bound && index > 0 {
                Some(SkipReason::StateBound)
            } else if attempted >= self.config.max_target_attempts {
                Some(SkipReason::AttemptLimit)
            } else if self.past_deadline(now) {
                Some(SkipReason::Deadline)
            } else if self.cooling(index, target, now) {
                Some(SkipReason::CoolingDown)
            } else if target.down_until(now).is_some() {
                Some(SkipReason::Unhealthy)
            } else if self.sends_left < target.max_sends {
                Some(SkipReason::SendBudget)
            } else {
                None
            };
            if let Some(reason) = skip {
                self.record(target, AttemptOutcome::Skipped(reason));
                continue;
            }
            attempted += 1;
            observe::failover_attempt(round);
            let mut request_parts = parts.clone();
            let mut request_body = body.clone();
            if let Some(rewrite) = &target.rewrite {
                if let Err(error) = rewrite(&mut request_parts, &mut request_body) {
                    return RoundEnd::Final(Err(self.error(FailoverStop::Rewrite, Some(error))));
                }
            }
            let cooling_tag = self.cooling_tag(target, body, &request_body);
            let request = Request::from_parts(request_parts, Full::new(request_body));
            let sent_at = Instant::now();
            let call = target.service.clone().oneshot(request);
            let first_content = target
                .first_content_timeout
                .and_then(|t| sent_at.checked_add(t));
            let limit = [self.deadline, first_content].into_iter().flatten().min();
            let result: Option<Result<Response<ResBody>, BoxError>> = match limit {
                Some(limit) => tokio::time::timeout_at(limit, call)
                    .await
                    .ok()
                    .map(|result| result.map_err(Into::into)),
                None => Some(call.await.map_err(Into::into)),
            };
            self.slowest = self.slowest.max(sent_at.elapsed());
            let Some(result) = result else {
                // Timed out: it may have been sent and executed.
                self.spend(target.max_sends);
                if self.past_deadline(Instant::now()) {
                    self.record(target, AttemptOutcome::Failed);
                    return self.deadline_passed();
                }
                self.record(target, AttemptOutcome::FirstContentTimeout);
                failed(target);
                ambiguous = true;
                continue;
            };
            match result {
                Ok(response) => match self.judge_answer(&response, target, cooling_tag) {
                    Verdict::Rejected(rejection) => {
                        self.rejected(index, target, rejection, cooling_tag);
                        not_throttled |= !throttled(rejection);
                        self.last_answer = Some((Arc::clone(&target.name), keep(response).await));
                    }
                    Verdict::Final => {
                        let mut response = match moves_on(response).await {
                            Ok(kept) => {
                                // Before content, but maybe executed: on
                                // to the next target, no further round.
                                self.record(target, AttemptOutcome::MovedOn(kept.status()));
                                failed(target);
                                ambiguous = true;
                                self.ready[index] = overload::named_ready(kept.headers());
                                self.last_answer = Some((Arc::clone(&target.name), kept));
                                continue;
                            }
                            Err(response) => response,
                        };
                        self.record(target, AttemptOutcome::Answered(response.status()));
                        if response.status().is_server_error() {
                            failed(target);
                        }
                        if self.report.rounds > 1 {
                            observe::failover_round_served();
                        }
                        self.report.stop = FailoverStop::Answered;
                        self.report.answered_by = Some(Arc::clone(&target.name));
                        response.extensions_mut().insert(self.report.clone());
                        return RoundEnd::Final(Ok(response));
                    }
                },
                Err(error) => match self.judge_error(&*error) {
                    Verdict::Rejected(rejection) => {
                        self.rejected(index, target, rejection, cooling_tag);
                        not_throttled |= !throttled(rejection);
                        self.last_error = Some(error);
                    }
                    Verdict::Final => {
                        self.record(target, AttemptOutcome::Failed);
                        failed(target);
                        // A target's stack cut at the route's deadline.
                        if self.past_deadline(Instant::now()) {
                            return self.deadline_passed();
                        }
                        return RoundEnd::Final(Err(self.error(FailoverStop::Failed, Some(error))));
                    }
                },
            }
        }
        RoundEnd::Exhausted {
            ambiguous,
            not_throttled,
        }
    }

    /// An answer's meaning, and the sends it took. A target that retried
    /// on its own (its [`RetryReport`] counts more than one send) is
    /// certified only when every one of its sends was turned away.
    fn judge_answer<ResBody>(
        &mut self,
        response: &Response<ResBody>,
        target: &Target<S>,
        cooling_tag: ModelTag,
    ) -> Verdict {
        let report = response.extensions().get::<RetryReport>();
        self.spend(report.map_or(1, |r| r.attempts));
        // A retry stack's own account decides; only a plain target's
        // answer is judged here (a success is judged once, by its stack).
        let judge = || {
            self.config
                .policy
                .read(
                    &RetryState::new(),
                    Outcome::Response {
                        status: response.status(),
                        headers: response.headers(),
                        body: None,
                    },
                )
                .rejection
        };
        match certified(report, judge) {
            Some(rejection) => Verdict::Rejected(rejection),
            None => {
                // Only a target that cools down has its window read.
                let spent = target.cooldown.as_ref().and_then(|_| {
                    let window = request_window(response.headers(), SystemTime::now())?;
                    (window.remaining == 0).then_some(window.reset_in?)
                });
                if let Some(reset_in) = spent {
                    // No request left in the window: a rate limit.
                    target.extend_cooldown(
                        cooling_tag,
                        Instant::now() + reset_in.min(MAX_COOLDOWN),
                        true,
                    );
                }
                Verdict::Final
            }
        }
    }

    /// An error's meaning, and the sends it took.
    fn judge_error(&mut self, error: &(dyn std::error::Error + 'static)) -> Verdict {
        let report = error.downcast_ref::<RetryError>().map(RetryError::report);
        // Read only where no retry stack's account decides (`certified`
        // says where).
        let judge = || {
            self.config
                .policy
                .read(&RetryState::new(), Outcome::Error(error))
        };
        let (sends, rejection) = match report {
            Some(report) => (
                report.attempts,
                certified(Some(report), || judge().rejection),
            ),
            None => {
                let reading = judge();
                let unsent = reading.rejection.is_some_and(|r| {
                    matches!(r.kind, RejectionKind::NotConnected | RejectionKind::NotSent)
                });
                let sends = if unsent {
                    0
                } else {
                    u32::from(reading.reached_upstream())
                };
                (sends, reading.rejection)
            }
        };
        self.spend(sends);
        match rejection {
            Some(rejection) => Verdict::Rejected(rejection),
            None => Verdict::Final,
        }
    }

    /// Notes a rejection: in the report, and its wait for this request (and
    /// for every request naming the model `cooling_tag` stands for, when
    /// the target cools down).
    fn rejected(
        &mut self,
        index: usize,
        target: &Target<S>,
        rejection: Rejection,
        cooling_tag: ModelTag,
    ) {
        self.record(target, AttemptOutcome::Rejected(rejection));
        failed(target);
        let now = Instant::now();
        let rate_limited = rejection.kind == RejectionKind::RateLimited;
        self.ready[index] = match rejection.wait {
            Some(wait) => now.checked_add(wait).map(|at| Ready {
                at,
                named: true,
                rate_limited,
            }),
            None => Some(Ready {
                at: now + UNNAMED_ROUND_WAIT,
                named: false,
                rate_limited,
            }),
        };
        if let Some(wait) = rejection.wait {
            target.extend_cooldown(cooling_tag, now + wait.min(MAX_COOLDOWN), rate_limited);
        }
    }

    /// Which of the target's models a wait its provider names for this
    /// request's `sent` body holds: the model the request names, unless
    /// the target's rewrite changed it (a deployment serving other models'
    /// requests under one name), when it holds the target for every model.
    fn cooling_tag(&self, target: &Target<S>, original: &Bytes, sent: &Bytes) -> ModelTag {
        // Nothing to read again: no cooldown to key, a request naming no
        // model (held for every model already), or a body the rewrite left
        // as it was (the same bytes).
        let kept = sent.as_ptr() == original.as_ptr() && sent.len() == original.len();
        if target.cooldown.is_none() || self.model == ModelTag::EVERY || kept {
            return self.model;
        }
        if ModelTag::of(sent) == self.model {
            self.model
        } else {
            ModelTag::EVERY
        }
    }

    /// Whether the target is inside a wait its provider named: for this
    /// request (learned in an earlier round) or for every request.
    fn cooling(&self, index: usize, target: &Target<S>, now: Instant) -> bool {
        // The default pause after a rejection naming no wait only spaces
        // the rounds: such a target is asked again in the next one.
        let own =
            self.report.rounds > 1 && self.ready[index].is_some_and(|r| r.named && r.at > now);
        own || target.cooldown_state(self.model, now).is_some()
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

    /// When the soonest target that turned this request away (or is
    /// cooling down) takes requests again; `named` keeps only the waits a
    /// provider named.
    fn soonest_ready(&self, now: Instant, named: bool) -> Option<Instant> {
        self.soonest_cause(now, named).map(|(at, _)| at)
    }

    /// As [`soonest_ready`](Self::soonest_ready), with whether a rate limit
    /// named that wait.
    fn soonest_cause(&self, now: Instant, named: bool) -> Option<(Instant, bool)> {
        // A target takes requests again once every wait on it has passed:
        // its wait named to this request (not cut to the cooldown's
        // minute), its cooldown, and (unnamed by any provider) its time
        // down for its failures.
        let per_target = self
            .targets
            .iter()
            .zip(&self.ready)
            .filter_map(|(t, ready)| {
                let own = ready
                    .filter(|r| !named || r.named)
                    .map(|r| (r.at, r.rate_limited));
                let shared = t.cooldown_state(self.model, now);
                let down = t.down_until(now).filter(|_| !named).map(|at| (at, false));
                [own, shared, down]
                    .into_iter()
                    .flatten()
                    .max_by_key(|(at, _)| *at)
            });
        per_target
            .filter(|(at, _)| !named || *at > now)
            .min_by_key(|(at, _)| *at)
    }

    /// Whether another round may begin, and the wait before it, checked
    /// again at the moment it would begin.
    async fn next_round(
        &mut self,
        bound: bool,
        ambiguous: bool,
        not_throttled: bool,
    ) -> Result<(), Suppression> {
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
        if not_throttled {
            return Err(Suppression::NotThrottled);
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
        let asked = match self.soonest_ready(now, true) {
            // A wait a provider named is a floor of its own.
            Some(at) => at.saturating_duration_since(now),
            // None named: a backoff from now, doubling each round (a wait
            // counted from a rejection early in the round would be mostly
            // over already), and no sooner than a target down for its
            // failures is back.
            None => {
                let doublings = self.report.rounds.saturating_sub(1).min(6);
                let backoff = UNNAMED_ROUND_WAIT.saturating_mul(1 << doublings);
                self.soonest_ready(now, false)
                    .map_or(backoff, |at| at.saturating_duration_since(now).max(backoff))
            }
        };
        if asked > retry.max_wait {
            return Err(Suppression::WaitTooLong {
                asked,
                limit: retry.max_wait,
            });
        }
        // Spread the waiters over a fifth of the wait (at least 50 ms) past
        // it: never before the named wait.
        let spread = (asked / 5).max(Duration::from_millis(50));
        let wait = asked + spread.mul_f64(config.policy.unit_random());
        if self
            .deadline
            .is_some_and(|deadline| now + wait + self.slowest >= deadline)
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

    /// Whether the route's deadline has come by `now`.
    fn past_deadline(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|deadline| now >= deadline)
    }

    /// The deadline passed during an attempt: the last rejection, when one
    /// was kept, else the deadline's error.
    fn deadline_passed<ResBody>(&mut self) -> RoundEnd<ResBody> {
        if self.last_answer.is_some() {
            return RoundEnd::Final(self.take_exhausted(Suppression::Deadline));
        }
        RoundEnd::Final(Err(self.error(FailoverStop::Deadline, None)))
    }

    /// No further round: the last rejection, marked so the caller does not
    /// retry it at once.
    fn take_exhausted<ResBody>(
        &mut self,
        suppression: Suppression,
    ) -> Result<Response<FailoverBody<ResBody>>, BoxError> {
        observe::failover_suppressed(suppression.label());
        observe::failover_exhausted();
        self.report.suppressed = Some(suppression);
        let now = Instant::now();
        let cause = self.soonest_cause(now, true);
        let named = cause.map(|(at, _)| at);
        match self.last_answer.take() {
            Some((target, response)) => {
                let mut response = response.map(FailoverBody::kept);
                let headers = response.headers_mut();
                headers.insert("x-should-retry", HeaderValue::from_static("false"));
                // What is left of the soonest named wait, or none: the
                // answer's own wait was named when it came, not now.
                match named {
                    Some(at) => {
                        crate::downstream::GiveUpHeadersLayer::set_wait_headers(
                            headers,
                            at.saturating_duration_since(now),
                        );
                    }
                    None => {
                        headers.remove("retry-after");
                        headers.remove("retry-after-ms");
                    }
                }
                self.report.stop = FailoverStop::Exhausted;
                self.report.answered_by = Some(target);
                response.extensions_mut().insert(self.report.clone());
                Ok(response)
            }
            None => {
                let source = self.last_error.take();
                let left = named.map(|at| at.saturating_duration_since(now));
                // With no answer to hand over, a stall says more than a
                // refused connection: the target had taken the request.
                let timed_out = self
                    .report
                    .attempts
                    .iter()
                    .any(|a| a.outcome == AttemptOutcome::FirstContentTimeout);
                self.report.stop = if timed_out {
                    FailoverStop::FirstContentTimeout
                } else {
                    FailoverStop::Exhausted
                };
                let error = FailoverError::new(self.report.clone(), source)
                    .with_retry_after(left)
                    .with_rate_limited(cause.is_some_and(|(_, rate_limited)| rate_limited));
                Err(Box::new(error))
            }
        }
    }

    fn error(&mut self, stop: FailoverStop, source: Option<BoxError>) -> BoxError {
        // An exhaustion's error is made where its wait is known
        // (`take_exhausted`); every other end comes here.
        self.report.stop = stop;
        Box::new(FailoverError::new(self.report.clone(), source))
    }
}

/// A target's outcome as a rejection: a target that kept its own account
/// (a retry stack) is certified only when every send it made was turned
/// away; one without is judged on the outcome alone.
fn certified(
    report: Option<&RetryReport>,
    judge: impl FnOnce() -> Option<Rejection>,
) -> Option<Rejection> {
    match report {
        Some(report) if report.attempts > 0 => (report.rejected_sends >= report.attempts)
            .then_some(report.last_rejection)
            .flatten(),
        _ => judge(),
    }
}

/// A rate limit or an overload: what a further round may answer.
fn throttled(rejection: Rejection) -> bool {
    matches!(
        rejection.kind,
        RejectionKind::RateLimited | RejectionKind::Overloaded
    )
}

/// An answer that is not a certified rejection, read as far as needed:
/// `Ok` with its body read when it is an overload answered before content
/// (the request moves on), else `Err` with the answer to hand over.
async fn moves_on<B>(response: Response<B>) -> Result<Response<Bytes>, Response<FailoverBody<B>>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    match overload::shape(response.status()) {
        Shape::Answer => Err(response.map(FailoverBody::upstream)),
        Shape::Overload => Ok(keep(response).await),
        Shape::ReadTheBody => {
            let kept = keep(response).await;
            if overload::body_names_overload(kept.body()) {
                Ok(kept)
            } else {
                Err(kept.map(FailoverBody::kept))
            }
        }
    }
}

/// A rejection's answer with (the start of) its body read, so its
/// connection is free while the request waits or tries other targets.
async fn keep<B>(response: Response<B>) -> Response<Bytes>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let (parts, body) = response.into_parts();
    let read = tokio::time::timeout(KEPT_BODY_TIME, Limited::new(body, KEPT_BODY).collect()).await;
    let bytes = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        _ => Bytes::new(),
    };
    let mut parts = parts;
    parts.headers.remove(http::header::CONTENT_LENGTH);
    parts.headers.remove(http::header::TRANSFER_ENCODING);
    Response::from_parts(parts, bytes)
}

/// The whole request body, within the cap and the deadline: every attempt
/// gets a fresh copy of it.
async fn collect<B>(
    body: B,
    cap: usize,
    deadline: Option<Instant>,
) -> Result<Bytes, (FailoverStop, Option<BoxError>)>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let collect = Limited::new(body, cap).collect();
    let collected = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline, collect).await {
            Ok(collected) => collected,
            Err(_) => return Err((FailoverStop::Deadline, None)),
        },
        None => collect.await,
    };
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => {
            Err((FailoverStop::BodyTooLarge { cap }, None))
        }
        Err(error) => Err((FailoverStop::BodyFailed, Some(error))),
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

/// Counts a failure against `target`'s health, when it keeps one.
fn failed<S>(target: &Target<S>) {
    target.count_failure(Instant::now());
}
