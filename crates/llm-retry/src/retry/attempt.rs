//! Per-request context of [`RetryLayer`](crate::RetryLayer)'s response
//! future: the shared [`Account`] and the request template later attempts
//! are built from.

use super::account::{Account, Resend, Step};
use super::carry::{Carriage, Carry};
use crate::error::{BoxError, RetryError};
use crate::policy::{Outcome, RetryPolicy};
use crate::rate_limit::link::{GateLink, Sent};
use crate::rate_limit::Gate;
use crate::rate_limit::Head;
use crate::replay::ReplayBody;
use crate::report::{RetryReport, StopReason};
use http::{request, HeaderMap, Request, StatusCode};
use std::time::Duration;
use tracing::Span;

/// The request every later attempt is built from, and the next one's
/// body, once it is known to be replayable.
pub(super) struct Template<B> {
    parts: request::Parts,
    body: ReplayBody<B>,
    next: Option<ReplayBody<B>>,
    /// Reads the body whole when it is ready (`ReplayBody::fill_ready`,
    /// kept from where the body's type is known to be one).
    fill: fn(&ReplayBody<B>) -> Option<bytes::Bytes>,
}

impl<B> Resend<B> for Template<B> {
    fn body(&self) -> &ReplayBody<B> {
        &self.body
    }

    fn set_body(&mut self, body: ReplayBody<B>) {
        self.body = body;
    }

    fn headers_mut(&mut self) -> &mut HeaderMap {
        &mut self.parts.headers
    }

    fn head(&self) -> Head<'_> {
        Head::of(&self.parts)
    }

    fn whole_body(&self) -> Option<bytes::Bytes> {
        (self.fill)(&self.body)
    }

    fn prepare(&mut self) -> Result<(), StopReason> {
        self.next = Some(self.replica()?);
        Ok(())
    }

    fn unprepare(&mut self) {
        self.next = None;
    }
}

/// One logical request's context across its attempts.
pub(super) struct AttemptCtx<B> {
    account: Account,
    template: Template<B>,
    /// Each attempt's request carries the link in its extensions too.
    in_extensions: bool,
    /// The verdict the first attempt settles.
    probe: Option<Carriage>,
    /// Set while the link is not offered (no gate was below so far): the
    /// verdict a gate that asks all the same unsettles.
    unoffered: Option<Carriage>,
    /// A gate asked though the body was not read ahead for one: the
    /// resends hand it the body as the first send left it.
    body_owed: bool,
    /// The quiet gate right below (a `ClientLayer`'s), until it is not:
    /// while it is, the attempts go unoffered and this loop notes them.
    quiet: Option<Gate>,
    /// The note of the attempt in flight, sent while that gate was quiet.
    quiet_sent: Option<Sent>,
}

impl<B> AttemptCtx<B> {
    /// The context of a request whose first attempt sends `parts` (stamped
    /// and linked here) and `body`.
    #[inline]
    pub(super) fn new(
        parts: &mut request::Parts,
        body: &ReplayBody<B>,
        policy: RetryPolicy,
        carry: Carry,
    ) -> AttemptCtx<B>
    where
        B: http_body::Body<Data = bytes::Bytes>,
        B::Error: Into<crate::BoxError>,
    {
        let mut account = Account::open(policy, &parts.method, &parts.uri, &parts.extensions);
        account.stamp_attempt(&mut parts.headers);
        // Read ahead for a gate's key only where a gate may be below, and
        // keys its sends.
        if !matches!(carry, Carry::NoGate(_) | Carry::Quiet(_)) {
            account.know_body(body.fill_ready());
        }
        // An outer retry loop's link is not this one's gates' business (the
        // nearest loop's offer is what they take): off the first send and
        // the template of the resends alike.
        parts.extensions.remove::<GateLink>();
        let template = Template {
            parts: parts.clone(),
            body: body.replica(),
            next: None,
            fill: ReplayBody::<B>::fill_ready,
        };
        let mut quiet = None;
        let (in_extensions, probe, unoffered) = match carry {
            Carry::Offer => (false, None, None),
            Carry::Quiet(gate) => {
                quiet = Some(gate);
                (false, None, None)
            }
            Carry::NoGate(carriage) => (false, None, Some(carriage)),
            Carry::Extension => (true, None, None),
            Carry::Probe(carriage) => (true, Some(carriage), None),
        };
        if in_extensions {
            parts.extensions.insert(account.ensure_link().clone());
        }
        AttemptCtx {
            account,
            template,
            in_extensions,
            probe,
            unoffered,
            body_owed: false,
            quiet,
            quiet_sent: None,
        }
    }

    /// Calls `service` with `request`, offering the request's gate link
    /// to a gate it reaches.
    #[inline]
    pub(super) fn call<S, R>(&mut self, service: &mut S, request: R) -> S::Future
    where
        S: tower::Service<R>,
    {
        if let Some(gate) = &self.quiet {
            // The gate lets a send pass untouched while it is quiet; this
            // loop notes it, to key it should its answer be news.
            // The first send goes as the request starts: no clock read.
            let state = &self.account.state;
            let now = if state.attempts() == 1 {
                state.started()
            } else {
                tokio::time::Instant::now()
            };
            if let Some(sent) = Sent::unkeyed(gate, now) {
                self.quiet_sent = Some(sent);
                let _entered = self.account.span().enter();
                return crate::rate_limit::offer::noted(|| service.call(request));
            }
            // News came: from now on the gate keys every send, by the
            // body too.
            self.quiet = None;
            self.account.know_body(self.template.whole_body());
        }
        if self.unoffered.is_none() {
            return self.account.call(service, request);
        }
        let (future, asked) = self.account.call_unoffered(service, request);
        self.heard(asked);
        future
    }

    /// Polls the attempt in flight, offering the link to a gate a layer
    /// between calls only now (a gate under another gate, a failover's
    /// target). Always inlined, as `unoffered` is: the poll is not moved
    /// out of a call.
    #[inline(always)]
    pub(super) fn offering<T>(&mut self, poll: impl FnOnce() -> T) -> T {
        if self.quiet_sent.is_some() {
            // Passed untouched by a quiet gate: nothing to offer.
            return poll();
        }
        if self.unoffered.is_none() {
            return self.account.offering(poll);
        }
        let (polled, asked) = crate::rate_limit::offer::unoffered(poll);
        self.heard(asked);
        polled
    }

    /// A gate asked for the link though none was offered: the service's
    /// next request settles its verdict again, and this one's later
    /// attempts offer their link, with the body the gate keys by (its
    /// first attempt went to the gate without either).
    fn heard(&mut self, asked: bool) {
        if asked {
            if let Some(carriage) = self.unoffered.take() {
                carriage.gate_met();
                self.body_owed = true;
            }
        }
    }

    pub(super) fn span(&self) -> &Span {
        self.account.span()
    }

    pub(super) fn attempts(&self) -> u32 {
        self.account.state.attempts()
    }

    /// Whether a response's body must be read before judging it: only
    /// failures are; a success passes through untouched.
    pub(super) fn wants_body(&self, status: StatusCode) -> bool {
        status.is_client_error() || status.is_server_error()
    }

    pub(super) fn peek_limit(&self) -> usize {
        self.account.policy.error_body_peek()
    }

    /// The instant nothing of this request may outlive.
    pub(super) fn deadline(&self) -> Option<tokio::time::Instant> {
        self.account.deadline()
    }

    /// Called before each attempt: no gate has taken it yet.
    pub(super) fn begin_attempt(&self) {
        if let Some(link) = &self.account.link {
            link.reset_gated();
        }
    }

    /// When the attempt just called must have its response head, if an
    /// attempt timeout is set.
    pub(super) fn attempt_bound(&self) -> Option<tokio::time::Instant> {
        let timeout = self.account.policy.limits().attempt_timeout?;
        tokio::time::Instant::now().checked_add(timeout)
    }

    /// Whether a gate under this layer took the attempt in flight.
    pub(super) fn attempt_gated(&self) -> bool {
        self.account.link.as_ref().is_some_and(GateLink::gated)
    }

    /// The attempt's bound `until` has come: the later bound that holds
    /// instead, if a gate under this layer took the attempt. Its time counts
    /// from the gate's call of the stack under it, not from its queue: a
    /// send still queued is not cut before `timeout` from now, and one
    /// called at `t` not before `t + timeout`.
    pub(super) fn attempt_moved(
        &self,
        until: tokio::time::Instant,
    ) -> Option<tokio::time::Instant> {
        let link = self.account.link.as_ref().filter(|link| link.gated())?;
        let timeout = self.account.policy.limits().attempt_timeout?;
        let now = tokio::time::Instant::now();
        if now < until {
            return None;
        }
        match link.called() {
            None => now.checked_add(timeout),
            Some(called) => called.checked_add(timeout).filter(|&end| end > now),
        }
    }

    /// Time left before the request's deadline.
    pub(super) fn remaining(&self) -> Duration {
        self.deadline().map_or(Duration::MAX, |deadline| {
            deadline.saturating_duration_since(tokio::time::Instant::now())
        })
    }

    /// Judges an outcome (see [`Account::judge`]).
    #[inline]
    pub(super) fn judge(&mut self, outcome: Outcome<'_>) -> Step {
        if let Some(carriage) = self.probe.take() {
            let answered = matches!(outcome, Outcome::Response { .. });
            let offered = self.account.link.as_ref().is_some_and(GateLink::offered);
            carriage.settle(offered, self.attempt_gated(), answered);
        }
        self.account
            .judge(outcome, &mut self.template, &mut self.quiet_sent)
    }

    /// Puts fresh credentials on every later attempt.
    pub(super) fn apply_credentials(
        &mut self,
        fresh: HeaderMap,
        reason: String,
    ) -> Result<(), StopReason> {
        self.account
            .apply_credentials(fresh, reason, &mut self.template)
    }

    pub(super) fn finish(&self, stop: StopReason) -> RetryReport {
        self.account.finish(stop)
    }

    /// The prepared next request, counted as a send.
    pub(super) fn next_request(&mut self) -> Option<Request<ReplayBody<B>>> {
        let body = self.template.next.take()?;
        if std::mem::take(&mut self.body_owed) {
            // As the first send left it: whole once that send read it all.
            self.account.know_body(self.template.body.buffered());
        }
        let mut parts = self.template.parts.clone();
        if self.in_extensions {
            parts.extensions.insert(self.account.ensure_link().clone());
        }
        self.account.record_resend();
        self.account.stamp_attempt(&mut parts.headers);
        Some(Request::from_parts(parts, body))
    }

    /// Gives up because the inner service failed instead of becoming ready,
    /// or the deadline came first.
    pub(super) fn give_up_on_service_error(&self, now: tokio::time::Instant) -> RetryReport {
        self.account.give_up_on_service_error(now)
    }

    /// The error handed to the caller, carrying the report (a success's,
    /// should a first-try acceptance have been an error).
    pub(super) fn error(&self, report: Option<RetryReport>, source: Option<BoxError>) -> BoxError {
        let report = report.unwrap_or_else(|| self.finish(StopReason::Succeeded));
        Box::new(RetryError::new(report, source))
    }
}
