//! [`RateLimit`]: the service.

use super::future::ResponseFuture;
use super::gate::{Bounds, Gate};
use super::key::{default_key, TokenCost};
use super::link::GateLink;
use crate::error::BoxError;
use http::{Request, Response};
use std::task::{Context, Poll};
use tokio::time::Instant;
use tower::Service;

/// A service whose sends pass a shared per-key gate. Built by
/// [`RateLimitLayer`](super::RateLimitLayer).
#[derive(Debug)]
pub struct RateLimit<S> {
    inner: S,
    gate: Gate,
    /// The retry loop right above keeps the notes of the sends it lets go
    /// while the gate is quiet (a `ClientLayer`'s): they pass untouched.
    noted_above: bool,
    /// `inner` was readied by `poll_ready` (only while the gate is quiet
    /// and its sends pass): the next call goes through it.
    inner_ready: bool,
}

impl<S: Clone> Clone for RateLimit<S> {
    /// A clone of the inner service is not ready, whatever this one is.
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            gate: self.gate.clone(),
            noted_above: self.noted_above,
            inner_ready: false,
        }
    }
}

impl<S> RateLimit<S> {
    pub(super) fn new(inner: S, gate: Gate, noted_above: bool) -> RateLimit<S> {
        RateLimit {
            inner,
            gate,
            noted_above,
            inner_ready: false,
        }
    }

    /// Whether a send passes untouched: the gate is quiet, and the retry
    /// loop right above notes its sends.
    fn passes(&self) -> bool {
        self.noted_above && self.gate.is_quiet()
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    S::Error: Into<BoxError>,
{
    type Response = Response<ResBody>;
    type Error = BoxError;
    type Future = ResponseFuture<S, Request<ReqBody>>;

    /// Always ready: the gate takes every send into its queue. The inner
    /// service is readied by the send's future when its slot comes, so no
    /// readiness is reserved here only to be thrown away (or held through
    /// a wait). Where sends pass untouched (a quiet gate under a
    /// `ClientLayer`'s retry loop), ready when the inner service is.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.passes() && !self.inner_ready {
            std::task::ready!(self.inner.poll_ready(cx)).map_err(Into::into)?;
            self.inner_ready = true;
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let ready = std::mem::take(&mut self.inner_ready);
        if self.passes() {
            if ready {
                return ResponseFuture::called(self.inner.call(request));
            }
            return ResponseFuture::passed(self.inner.clone(), request);
        }
        let (parts, body) = request.into_parts();
        // The nearest retry loop's link: the one it offers, unless the
        // request carries another (a `tower::retry` path's, below it).
        let offered = super::offer::take();
        let link = match (parts.extensions.get::<GateLink>(), offered) {
            (Some(carried), Some(offered)) if !carried.same(&offered) => Some(carried.clone()),
            (_, Some(offered)) => {
                offered.mark_offered();
                Some(offered)
            }
            (carried, None) => carried.cloned(),
        };
        // Before any news, a retry loop above reads the answer: the send
        // goes at once, keyed only if news comes of it.
        let link = match (self.gate.quiet(), link) {
            (Some(quiet), Some(link)) => {
                let now = Instant::now();
                let order = quiet.send(now);
                link.mark_gated();
                let request = Request::from_parts(parts, body);
                let (ready, gate) = (self.inner.clone(), self.gate.clone());
                return ResponseFuture::unkeyed(ready, request, gate, link, (now, order));
            }
            (_, link) => link,
        };
        let model = link.as_ref().and_then(GateLink::model);
        let key = default_key(&parts, model.as_deref(), self.gate.key_hasher());
        // The caller's estimate, else (when the gate counts tokens) one
        // from the body, made before the gate's lock is taken.
        let cost = match (parts.extensions.get::<TokenCost>(), &link) {
            (Some(cost), _) => cost.0,
            (None, Some(link)) if self.gate.counts_tokens() => link.estimated_cost(),
            (None, _) => 0,
        };
        if let Some(link) = &link {
            link.mark_gated();
        }
        let bounds = link.as_ref().map_or_else(Bounds::default, |link| Bounds {
            deadline: link.deadline(),
            max_server_wait: Some(link.max_server_wait()),
            not_before: link.take_not_before(),
        });
        let request = Request::from_parts(parts, body);
        // The send's own clone, readied by its future when the slot comes
        // (or the instance `poll_ready` readied while the gate was quiet).
        let ready = if ready {
            let clone = self.inner.clone();
            std::mem::replace(&mut self.inner, clone)
        } else {
            self.inner.clone()
        };
        let now = Instant::now();
        match self.gate.reserve_send(key, cost, now, bounds) {
            Ok(reserved) => {
                let wait = reserved.booking.slot.saturating_duration_since(now);
                if !wait.is_zero() {
                    tracing::debug!(
                        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        "llm-retry: waiting for a rate-limit slot"
                    );
                }
                crate::observe::gate_wait(wait);
                ResponseFuture::queued(ready, request, self.gate.clone(), key, reserved, link)
            }
            Err(refused) => {
                tracing::warn!(error = %refused, "llm-retry: rate limit refused a send");
                crate::observe::gate_refusal(refused.label());
                ResponseFuture::refused(refused)
            }
        }
    }
}
