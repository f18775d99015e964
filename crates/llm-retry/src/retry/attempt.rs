//! Per-request bookkeeping shared by every state of the response future:
//! the request template, the account, hooks and tracing.

use crate::budget::WaitPermit;
use crate::error::{BoxError, RetryError};
use crate::hooks::{RetryEvent, SharedHooks};
use crate::policy::{CredentialsFuture, Decision, Outcome, RetryPolicy, RetryState};
use crate::rate_limit::link::GateLink;
use crate::replay::ReplayBody;
use crate::report::{RetryReport, StopReason};
use http::{request, Request, StatusCode};
use std::time::Duration;
use tracing::Span;

/// What the future does after an outcome was judged.
pub(super) enum Step {
    /// Sleep (holding the budget's wait permit, if any), then send the
    /// prepared next request.
    Wait(Duration, Option<WaitPermit>),
    /// Await new credentials, then send the next request.
    Refresh(CredentialsFuture),
    /// Hand the outcome to the caller with this report.
    Finish(RetryReport),
}

/// One logical request's context across its attempts.
pub(super) struct AttemptCtx<B> {
    pub(super) parts: request::Parts,
    pub(super) template: ReplayBody<B>,
    pub(super) next: Option<Request<ReplayBody<B>>>,
    pub(super) policy: RetryPolicy,
    pub(super) hooks: SharedHooks,
    pub(super) state: RetryState,
    /// Shared with a rate-limit gate under this layer, if there is one.
    link: GateLink,
    /// Nothing of this request outlives it (`None`: beyond any clock).
    deadline: Option<tokio::time::Instant>,
    span: Span,
}

impl<B> AttemptCtx<B> {
    /// The context and the first attempt's request.
    pub(super) fn new(
        parts: request::Parts,
        body: ReplayBody<B>,
        policy: RetryPolicy,
        hooks: SharedHooks,
    ) -> (AttemptCtx<B>, Request<ReplayBody<B>>) {
        // Only method, host and path: a query string or header may hold a key.
        let span = tracing::info_span!(
            "llm_retry.request",
            http.request.method = %parts.method,
            server.address = parts.uri.host().unwrap_or(""),
            url.path = parts.uri.path(),
            http.request.resend_count = tracing::field::Empty,
        );
        let template = body.replica();
        if let Some(budget) = policy.budget() {
            budget.deposit();
        }
        let mut state = RetryState::new();
        state.record_send();
        let mut parts = parts;
        let limits = policy.limits();
        let deadline = tokio::time::Instant::now().checked_add(limits.max_elapsed);
        let link = GateLink::new(limits, deadline);
        parts.extensions.insert(link.clone());
        let first = Request::from_parts(parts.clone(), body);
        let ctx = AttemptCtx {
            parts,
            template,
            next: None,
            policy,
            hooks,
            state,
            link,
            deadline,
            span,
        };
        (ctx, first)
    }

    pub(super) fn span(&self) -> &Span {
        &self.span
    }

    pub(super) fn attempts(&self) -> u32 {
        self.state.attempts()
    }

    /// Whether a response's body must be read before judging it: only
    /// failures are; a success passes through untouched.
    pub(super) fn wants_body(&self, status: StatusCode) -> bool {
        status.is_client_error() || status.is_server_error()
    }

    pub(super) fn peek_limit(&self) -> usize {
        self.policy.error_body_peek()
    }

    /// The instant nothing of this request may outlive.
    pub(super) fn deadline(&self) -> Option<tokio::time::Instant> {
        self.deadline
    }

    /// When the attempt just called must have its response head, if an
    /// attempt timeout is set and no gate under this layer took the
    /// attempt (a gate times it from its send, not from its queue).
    pub(super) fn attempt_bound(&self) -> Option<tokio::time::Instant> {
        let timeout = self.policy.limits().attempt_timeout?;
        if self.link.take_gated() {
            return None;
        }
        tokio::time::Instant::now().checked_add(timeout)
    }

    /// Time left before the request's deadline.
    pub(super) fn remaining(&self) -> Duration {
        self.policy
            .limits()
            .max_elapsed
            .saturating_sub(self.state.elapsed())
    }

    /// Judges an outcome, fires hooks and tracing, and prepares the next
    /// request when the answer is to retry.
    pub(super) fn judge(&mut self, outcome: Outcome<'_>) -> Step {
        let (status, error) = match outcome {
            Outcome::Response { status, .. } => (Some(status), None),
            Outcome::Error(e) => (None, Some(e)),
        };
        let sent = self.link.take_sent();
        self.state
            .set_gate_paced(sent.as_ref().is_some_and(|sent| sent.paced()));
        let judgement = self
            .policy
            .judge(&self.state, outcome, self.state.elapsed());
        // The gate under this layer (if any) learns what the answer meant
        // for its key: a 429's named wait holds the key.
        if let Some(sent) = sent {
            let limit = self.policy.limits().max_server_wait;
            sent.report(judgement.key, tokio::time::Instant::now(), limit);
        }
        self.state.record_outcome(status, &judgement);
        let (delay, server_wait, charged) = match judgement.decision {
            Decision::Accept => return Step::Finish(self.finish(StopReason::Succeeded)),
            Decision::Stop(reason) => return Step::Finish(self.finish(reason)),
            Decision::Recover(recovery) => return self.recover(recovery, &judgement.class, status),
            Decision::Retry {
                delay,
                server_wait,
                charged,
                ..
            } => (delay, server_wait, charged),
        };
        // Prepare first: a resend that cannot happen spends no budget.
        if let Err(stop) = self.prepare_next() {
            return Step::Finish(self.finish(stop));
        }
        let spent = if charged {
            self.policy.spend_budget(delay)
        } else {
            Ok(None)
        };
        let permit = match spent {
            Ok(permit) => permit,
            Err(stop) => {
                self.next = None;
                return Step::Finish(self.finish(stop));
            }
        };
        self.state.record_wait(delay, server_wait.is_some());
        let event = RetryEvent {
            retry: self.state.attempts(),
            max_retries: self.policy.limits().max_retries,
            delay,
            server_wait,
            status,
            error: error.map(|e| e.to_string()),
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
        self.hooks.0.on_retry(&event);
        Step::Wait(delay, permit)
    }

    /// Builds the next request from the template, or says why it cannot be sent.
    pub(super) fn prepare_next(&mut self) -> Result<(), StopReason> {
        let Some(body) = self.template.try_clone() else {
            if self.template.source_failed() {
                return Err(StopReason::RequestBodyFailed);
            }
            let cap = self.template.cap();
            return Err(StopReason::BodyNotReplayable { cap });
        };
        self.next = Some(Request::from_parts(self.parts.clone(), body));
        Ok(())
    }

    pub(super) fn finish(&self, stop: StopReason) -> RetryReport {
        let report = self.state.report(stop);
        if report.stop == StopReason::Succeeded {
            if report.retried() {
                tracing::info!(attempts = report.attempts, "llm-retry: recovered");
                self.hooks.0.on_recovered(&report);
            }
        } else {
            tracing::warn!(report = %report, reason = report.stop.label(), "llm-retry: giving up");
            crate::observe::give_up(&report.stop);
            self.hooks.0.on_give_up(&report);
        }
        report
    }

    /// The prepared next request, counted as a send.
    pub(super) fn next_request(&mut self) -> Option<Request<ReplayBody<B>>> {
        let next = self.next.take()?;
        self.state.record_send();
        self.span.record(
            "http.request.resend_count",
            self.state.attempts().saturating_sub(1),
        );
        Some(next)
    }

    /// Gives up because the inner service failed instead of becoming ready,
    /// or the deadline came first.
    pub(super) fn give_up_on_service_error(&self, now: tokio::time::Instant) -> RetryReport {
        if self.deadline.is_some_and(|deadline| now >= deadline) {
            return self.finish(StopReason::DeadlineReached {
                elapsed: self.state.elapsed(),
                wait: Duration::ZERO,
                limit: self.policy.limits().max_elapsed,
            });
        }
        self.finish(StopReason::ServiceFailed)
    }

    /// The error handed to the caller, carrying the report.
    pub(super) fn error(&self, report: RetryReport, source: BoxError) -> BoxError {
        Box::new(RetryError::new(report, Some(source)))
    }
}

/// A stop the caller must act on even though a response arrived (a
/// manual fallback): it becomes an error instead of the response.
pub(super) fn fails_even_with_response(report: &RetryReport) -> Option<BoxError> {
    matches!(report.stop, StopReason::FallbackTriggered { .. })
        .then(|| Box::new(RetryError::new(report.clone(), None)) as BoxError)
}
