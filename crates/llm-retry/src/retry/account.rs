//! One logical request's account across its attempts, and what is done
//! with each judged outcome: the part both retry paths share.
//!
//! [`RetryLayer`](crate::RetryLayer) and the `tower::retry::Policy` path
//! both keep an [`Account`] and hand every outcome to [`Account::judge`],
//! which asks the policy for its judgement,
//! tells a gate below what it meant for the key, spends the budget, applies
//! recoveries to the request through [`Resend`], fires the hooks and
//! returns the one [`Step`] the path then carries out.

use crate::budget::WaitPermit;
use crate::classify::{classify_status, Classification};
use crate::deadline::Deadline;
use crate::error::{BoxError, RetryError};
use crate::hooks::{RecoveryEvent, RetryEvent};
use crate::policy::{CredentialsFuture, Decision, Outcome, Recovery, RecoveryAction};
use crate::policy::{RetryPolicy, RetryState};
use crate::rate_limit::link::{GateLink, Sent};
use crate::rate_limit::offer::LinkBounds;
use crate::rate_limit::Head;
use crate::recover::{rewrite_body, BodyEdit};
use crate::replay::ReplayBody;
use crate::report::{RetryReport, StopReason};
use http::{header, Extensions, HeaderMap, Method, StatusCode, Uri};
use std::time::Duration;
use tokio::time::Instant;
use tracing::Span;

/// What a path does after an outcome was judged.
// Every request ends with `Finish`, successes included: boxing the report
// would add an allocation to each one to shrink the rarer variants.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Step {
    /// Sleep (holding the budget's wait permit, if any), then send the
    /// next request.
    Wait(Duration, Option<WaitPermit>),
    /// Await new credentials, then send the next request; the reason is
    /// announced once they are applied.
    Refresh(CredentialsFuture, String),
    /// Hand the response to the caller as it is: accepted at its first
    /// attempt, with nothing waited, so there is nothing to report.
    Served,
    /// Hand the outcome to the caller with this report.
    Finish(RetryReport),
}

/// The request every later attempt is built from, as a path keeps it.
pub(crate) trait Resend<B> {
    /// The body later attempts send.
    fn body(&self) -> &ReplayBody<B>;
    /// Replaces the body later attempts send.
    fn set_body(&mut self, body: ReplayBody<B>);
    /// The headers later attempts send.
    fn headers_mut(&mut self) -> &mut HeaderMap;
    /// What later attempts are sent to, and with: a gate's key is read
    /// from it.
    fn head(&self) -> Head<'_>;
    /// The body later attempts send, whole, if it is (read now if it is
    /// ready and nothing read it yet).
    fn whole_body(&self) -> Option<bytes::Bytes> {
        self.body().buffered()
    }
    /// Readies the next attempt's request, or says why it cannot be sent.
    fn prepare(&mut self) -> Result<(), StopReason> {
        self.replica().map(drop)
    }
    /// A copy of the body from its first byte, or why there is none.
    fn replica(&self) -> Result<ReplayBody<B>, StopReason> {
        match self.body().try_clone() {
            Some(body) => Ok(body),
            None if self.body().source_failed() => Err(StopReason::RequestBodyFailed),
            None => Err(StopReason::BodyNotReplayable {
                cap: self.body().cap(),
            }),
        }
    }
    /// Forgets a request readied for an attempt that will not happen.
    fn unprepare(&mut self) {}
}

/// One logical request's account: its policy, what it has spent, its
/// deadline, its link to a gate below and its tracing span.
#[derive(Clone)]
pub(crate) struct Account {
    pub(crate) policy: RetryPolicy,
    pub(crate) state: RetryState,
    /// Shared with a rate-limit gate under the retry path, once a gate
    /// made it (or a recovery or a token estimate needed it first).
    pub(crate) link: Option<GateLink>,
    /// The whole request body, for the link a gate makes: offered with it.
    body: Option<bytes::Bytes>,
    /// Nothing of the request outlives it (`None`: beyond any clock).
    deadline: Option<Instant>,
    span: Span,
}

impl Account {
    /// The account of a request whose first send is about to happen: its
    /// send is counted and deposited in the shared budget.
    /// A [`Deadline`] in `extensions` (a failover's) ends it sooner than
    /// its policy's `max_elapsed` would.
    pub(crate) fn open(
        policy: RetryPolicy,
        method: &Method,
        uri: &Uri,
        extensions: &Extensions,
    ) -> Account {
        // Only method, host and path: a query string or header may hold a key.
        let span = tracing::info_span!(
            "llm_retry.request",
            http.request.method = %method,
            server.address = uri.host().unwrap_or(""),
            url.path = uri.path(),
            http.request.resend_count = tracing::field::Empty,
        );
        let now = Instant::now();
        if let Some(budget) = policy.budget() {
            budget.deposit_at(now);
        }
        let mut state = RetryState::started_at(now);
        state.record_send();
        let limits = policy.limits();
        let mut deadline = now.checked_add(limits.max_elapsed);
        if let Some(Deadline(caller)) = extensions.get::<Deadline>().copied() {
            if deadline.is_none_or(|own| caller < own) {
                deadline = Some(caller);
                state.bound_elapsed(caller.saturating_duration_since(now));
            }
        }
        Account {
            policy,
            state,
            link: None,
            body: None,
            deadline,
            span,
        }
    }

    /// What a gate makes the request's link with.
    pub(crate) fn link_bounds(&self) -> LinkBounds {
        LinkBounds::new(self.policy.limits(), self.deadline)
    }

    /// Calls `service` with one attempt's request inside the request's
    /// span, offering the link to a gate the call reaches.
    #[inline]
    pub(crate) fn call<S, R>(&mut self, service: &mut S, request: R) -> S::Future
    where
        S: tower::Service<R>,
    {
        let bounds = self.link_bounds();
        let _entered = self.span.enter();
        let call = || service.call(request);
        crate::rate_limit::offer::offering(&mut self.link, &mut self.body, bounds, call)
    }

    /// As [`call`](Self::call), without offering the link: also says
    /// whether a gate asked for one.
    #[inline]
    pub(crate) fn call_unoffered<S, R>(&mut self, service: &mut S, request: R) -> (S::Future, bool)
    where
        S: tower::Service<R>,
    {
        let _entered = self.span.enter();
        crate::rate_limit::offer::unoffered(|| service.call(request))
    }

    /// Runs `f` (a poll of the attempt in flight) offering the link, as
    /// [`call`](Self::call) does.
    pub(crate) fn offering<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let bounds = self.link_bounds();
        crate::rate_limit::offer::offering(&mut self.link, &mut self.body, bounds, f)
    }

    /// A body whole before its first send, or as a recovery rewrote it: a
    /// gate below keys the send by the model it names, and a token-paced
    /// key estimates its cost from it. Handed to the link, or offered with
    /// it to the gate that makes it.
    pub(crate) fn know_body(&mut self, whole: Option<bytes::Bytes>) {
        match (&self.link, whole) {
            (Some(link), Some(bytes)) => link.set_body(bytes),
            (None, whole) => self.body = whole,
            (Some(_), None) => {}
        }
    }

    /// The request's link, made now if no gate made it yet.
    pub(crate) fn ensure_link(&mut self) -> &GateLink {
        let bounds = self.link_bounds();
        let body = &mut self.body;
        self.link
            .get_or_insert_with(|| GateLink::new(bounds, body.take()))
    }

    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// Nothing of this request outlives it (`None`: beyond any clock).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Judges an outcome and does what the judgement says to everything
    /// but the path's own state machine: the gate, the budget, the request
    /// (recoveries), the hooks and tracing.
    ///
    /// `quiet` holds the attempt's note, where the loop noted it itself
    /// (it went while the gate right below was quiet); taken here.
    pub(crate) fn judge<B>(
        &mut self,
        outcome: Outcome<'_>,
        resend: &mut impl Resend<B>,
        quiet: &mut Option<Sent>,
    ) -> Step {
        let (status, error) = match outcome {
            Outcome::Response { status, .. } => (Some(status), None),
            Outcome::Error(e) => (None, Some(e)),
        };
        let mut sent = match self.link.as_ref().and_then(GateLink::take_sent) {
            Some(sent) => Some(sent),
            None => quiet.take(),
        };
        // The common answer: a success at the first try that no gate took
        // (or a quiet one let pass, and that states no quota) is served as
        // it is; reading and deciding it would say the same.
        if let (
            Outcome::Response {
                body: None,
                headers,
                ..
            },
            Some(status),
        ) = (&outcome, status)
        {
            if classify_status(status, None) == Classification::Success && self.state.untouched() {
                match sent {
                    None => return Step::Served,
                    // Read for quotas only where the gate is quiet: a keyed
                    // send's answer is read whole below anyway.
                    Some(note) if note.is_unkeyed() && !crate::hint::may_state_quotas(headers) => {
                        match note.served_quietly() {
                            Ok(()) => return Step::Served,
                            Err(note) => sent = Some(note),
                        }
                    }
                    Some(note) => sent = Some(note),
                }
            }
        }
        self.state.set_gate(sent.as_ref().map(Sent::as_judged));
        let reading = self.policy.read(&self.state, outcome);
        // Read once: the judgement and an immediate stop's report agree. A
        // success at the first try is reported nowhere: no clock read.
        let served_first = status.is_some() && reading.is_success() && self.state.untouched();
        let elapsed = if served_first {
            Duration::ZERO
        } else {
            self.state.elapsed()
        };
        // The gate below (if any) acts on what the answer meant for its
        // key (a 429's named wait holds the key), before the decision,
        // which says where the resend waits.
        if let Some(sent) = sent {
            if self.link.is_none() {
                // A quiet gate's send, its answer news: the link it is
                // keyed by, with the body (an answer may come before its
                // send read any of it).
                self.know_body(resend.whole_body());
            }
            let limit = self.policy.limits().max_server_wait;
            let link = self.ensure_link();
            let wait = sent.report(link, reading.key, Instant::now(), limit, resend.head());
            self.state.set_gate_wait(wait);
        }
        if served_first {
            // A success is accepted (`decide` says so of every success). No
            // record, no report, no hook: the success path pays for none.
            return Step::Served;
        }
        let judgement = self.policy.decide(&self.state, reading, elapsed);
        self.state.record_outcome(status, &judgement);
        let (delay, server_wait, charged, in_gate) = match judgement.decision {
            Decision::Accept => {
                return Step::Finish(self.finish_after(StopReason::Succeeded, elapsed))
            }
            Decision::Stop(reason) => return Step::Finish(self.finish_after(reason, elapsed)),
            Decision::Recover(recovery) => {
                return self.recover(recovery, &judgement.class, status, resend)
            }
            Decision::Retry {
                delay,
                server_wait,
                charged,
                in_gate,
                ..
            } => (delay, server_wait, charged, in_gate),
        };
        let sleep = if in_gate { Duration::ZERO } else { delay };
        // Prepare first: a resend that cannot happen spends no budget.
        if let Err(stop) = resend.prepare() {
            return Step::Finish(self.finish(stop));
        }
        let spent = if charged {
            self.policy.spend_budget(sleep)
        } else {
            Ok(None)
        };
        let permit = match spent {
            Ok(permit) => permit,
            Err(stop) => {
                resend.unprepare();
                return Step::Finish(self.finish(stop));
            }
        };
        self.state.record_wait(delay, server_wait.is_some());
        let event = RetryEvent {
            // The resend about to go; a send the gate refused was none.
            retry: self.state.attempts().max(1),
            max_retries: self.policy.limits().max_retries,
            delay,
            server_wait: server_wait.map(|w| w.duration),
            status,
            error: error.map(|e| crate::redact::error_text(&e.to_string())),
            class: judgement.class,
        };
        tracing::warn!(
            retry = event.retry,
            max_retries = event.max_retries,
            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            server_named_wait = server_wait.is_some(),
            status = status.map(|s| s.as_u16()),
            error = event.error.as_deref(),
            class = crate::observe::class_label(&event.class),
            budget_available = self.policy.budget().map(|b| b.level().available),
            "llm-retry: attempt failed, retrying"
        );
        crate::observe::retry(&event.class);
        self.policy.hooks().on_retry(&event);
        Step::Wait(sleep, permit)
    }

    /// Starts a recovery decided by the policy.
    fn recover<B>(
        &mut self,
        recovery: Recovery,
        class: &Classification,
        status: Option<StatusCode>,
        resend: &mut impl Resend<B>,
    ) -> Step {
        let reason = match status {
            Some(status) => format!("{class:?} on status {}", status.as_u16()),
            None => format!("{class:?}"),
        };
        let (edit, action) = match &recovery {
            Recovery::CutMaxTokens { to } => {
                (BodyEdit::MaxTokens(*to), RecoveryAction::CutMaxTokens)
            }
            Recovery::FallbackModel { model } => (
                BodyEdit::Model(model.clone()),
                RecoveryAction::FallbackModel,
            ),
            Recovery::RefreshCredentials => {
                let Some(hook) = self.policy.credentials().cloned() else {
                    return self
                        .recovery_failed(RecoveryAction::RefreshCredentials, "no hook".into());
                };
                // A resend that cannot happen asks for no credentials and
                // spends no budget.
                if let Err(stop) = resend.prepare() {
                    return Step::Finish(self.finish(stop));
                }
                if let Err(stop) = self.policy.spend_budget(Duration::ZERO) {
                    return Step::Finish(self.finish(stop));
                }
                hook.clear_token_cache();
                // Recorded and announced once its credentials are applied:
                // a refresh that fails changed nothing.
                return Step::Refresh(hook.refresh(), reason);
            }
        };
        // Rewrite the request body for every later attempt and resend at once.
        let Some(body) = resend.body().buffered() else {
            let why = "the request body was not fully buffered".to_owned();
            return self.recovery_failed(action, why);
        };
        let (rewritten, applied) = match rewrite_body(&body, &edit) {
            Ok(done) => done,
            Err(error) => return self.recovery_failed(action, error.to_string()),
        };
        // A token-paced key books the next sends at the new body's cost.
        self.know_body(Some(rewritten.clone()));
        let replaced = resend.body().replaced_with(rewritten);
        resend.set_body(replaced);
        self.state.record_recovery(&recovery);
        // The length changed; the client derives the new one from the body.
        resend.headers_mut().remove(header::CONTENT_LENGTH);
        self.announce(RecoveryEvent {
            action,
            reason,
            old: Some(applied.old),
            new: Some(applied.new),
        });
        if let Err(stop) = resend
            .prepare()
            .and_then(|()| self.policy.spend_budget(Duration::ZERO))
        {
            resend.unprepare();
            return Step::Finish(self.finish(stop));
        }
        Step::Wait(Duration::ZERO, None)
    }

    /// Puts fresh credentials on every later attempt, and records and
    /// announces the refresh (asked for `reason`).
    pub(crate) fn apply_credentials<B>(
        &mut self,
        fresh: HeaderMap,
        reason: String,
        resend: &mut impl Resend<B>,
    ) -> Result<(), StopReason> {
        let headers = resend.headers_mut();
        for name in fresh.keys() {
            headers.remove(name);
        }
        for (name, value) in &fresh {
            let mut value = value.clone();
            value.set_sensitive(true);
            headers.append(name.clone(), value);
        }
        tracing::info!(headers = fresh.len(), "llm-retry: credentials refreshed");
        self.state.record_recovery(&Recovery::RefreshCredentials);
        self.announce(RecoveryEvent {
            action: RecoveryAction::RefreshCredentials,
            reason,
            old: None,
            new: None,
        });
        resend.prepare()
    }

    /// Ends the request because a recovery could not be applied.
    fn recovery_failed(&self, action: RecoveryAction, reason: String) -> Step {
        Step::Finish(self.finish(StopReason::RecoveryFailed { action, reason }))
    }

    fn announce(&self, event: RecoveryEvent) {
        tracing::warn!(
            action = %event.action,
            reason = %event.reason,
            old = event.old.as_deref(),
            new = event.new.as_deref(),
            "llm-retry: recovering"
        );
        crate::observe::recovery(event.action);
        self.policy.hooks().on_recover(&event);
    }

    /// The report of a request stopping for `stop`, with its hooks fired.
    pub(crate) fn finish(&self, stop: StopReason) -> RetryReport {
        self.finish_after(stop, self.state.elapsed())
    }

    /// As [`finish`](Self::finish), `elapsed` after the start.
    fn finish_after(&self, stop: StopReason, elapsed: Duration) -> RetryReport {
        let report = self.state.report_after(stop, elapsed);
        // Recorded once, at the end: a text log repeats a span field at
        // every record, and each retry line names its resend already.
        if report.retried() {
            self.span.record(
                "http.request.resend_count",
                report.attempts.saturating_sub(1),
            );
        }
        if report.stop == StopReason::Succeeded {
            if report.retried() {
                tracing::info!(attempts = report.attempts, "llm-retry: recovered");
                self.policy.hooks().on_recovered(&report);
            }
        } else {
            tracing::warn!(report = %report, reason = report.stop.label(), "llm-retry: giving up");
            crate::observe::give_up(&report.stop);
            self.policy.hooks().on_give_up(&report);
        }
        report
    }

    /// Names the attempt about to go in the configured attempt header: the
    /// retries before it.
    pub(crate) fn stamp_attempt(&self, headers: &mut HeaderMap) {
        if let Some(name) = self.policy.attempt_header() {
            let retries = self.state.attempts().saturating_sub(1);
            headers.insert(name.clone(), http::HeaderValue::from(retries));
        }
    }

    /// Counts a resend about to go.
    pub(crate) fn record_resend(&mut self) {
        self.state.record_send();
    }

    /// Gives up because the inner service failed instead of becoming ready,
    /// or the deadline came first.
    pub(crate) fn give_up_on_service_error(&self, now: Instant) -> RetryReport {
        if self.deadline().is_some_and(|deadline| now >= deadline) {
            return self.finish(StopReason::DeadlineReached {
                elapsed: self.state.elapsed(),
                wait: Duration::ZERO,
                limit: self.state.limits(self.policy.limits()).max_elapsed,
            });
        }
        self.finish(StopReason::ServiceFailed)
    }
}

/// A stop the caller must act on even though a response arrived (a
/// manual fallback): it becomes an error instead of the response.
pub(crate) fn fails_even_with_response(report: &RetryReport) -> Option<BoxError> {
    matches!(report.stop, StopReason::FallbackTriggered { .. })
        .then(|| Box::new(RetryError::new(report.clone(), None)) as BoxError)
}
