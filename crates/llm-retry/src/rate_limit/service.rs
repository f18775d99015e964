//! [`RateLimit`]: the service.

use super::future::ResponseFuture;
use super::gate::{Bounds, Gate};
use super::key::{key_of, Head, TokenCost};
use super::link::GateLink;
use crate::error::BoxError;
use http::{Request, Response};
use std::task::{Context, Poll};
use tokio::time::Instant;
use tower::Service;

/// A service whose sends pass a shared per-key gate. Built by
/// [`RateLimitLayer`](super::RateLimitLayer).
#[derive(Debug, Clone)]
pub struct RateLimit<S> {
    inner: S,
    gate: Gate,
    /// The retry loop right above notes the sends it makes while the
    /// gate is quiet (a `ClientLayer`'s): a call it marks so passes
    /// untouched.
    noted_above: bool,
}

impl<S> RateLimit<S> {
    pub(super) fn new(inner: S, gate: Gate, noted_above: bool) -> RateLimit<S> {
        RateLimit {
            inner,
            gate,
            noted_above,
        }
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
    /// a wait).
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // A send the retry loop right above noted itself, the gate quiet
        // when it looked: it passes, whatever news came since.
        if self.noted_above && super::offer::take_noted() {
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
        let model = link.as_ref().and_then(GateLink::model);
        let key = key_of(Head::of(&parts), model.as_deref(), &self.gate.key_hasher);
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
        // The send's own clone, readied by its future when the slot comes.
        let ready = self.inner.clone();
        let now = Instant::now();
        match self.gate.reserve_send(key, cost, now, bounds) {
            Ok(reserved) => {
                let wait = reserved.0.slot.saturating_duration_since(now);
                if !wait.is_zero() {
                    tracing::debug!(
                        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        "llm-retry: waiting for a rate-limit slot"
                    );
                }
                crate::observe::gate_wait(wait);
                ResponseFuture::queued(ready, request, self.gate.clone(), key, reserved, link)
            }
            Err(refused) => ResponseFuture::refused(refused),
        }
    }
}
