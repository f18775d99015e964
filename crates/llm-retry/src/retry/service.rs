//! [`Retry`]: the service.

use super::carry::{Carriage, Carry};
use super::future::ResponseFuture;
use super::RetryBody;
use crate::error::BoxError;
use crate::policy::RetryPolicy;
use crate::rate_limit::Gate;
use crate::replay::ReplayBody;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use std::task::{Context, Poll};
use tower::Service;

/// A service that retries failed calls to `S`. Built by [`RetryLayer`](super::RetryLayer).
#[derive(Debug, Clone)]
pub struct Retry<S> {
    inner: S,
    policy: RetryPolicy,
    /// How requests carry their gate link, learned from the first ones;
    /// `None` where a gate sits right below, which the offer reaches.
    carriage: Option<Carriage>,
    /// That gate (a `ClientLayer`'s): while it is quiet, the loop notes
    /// its sends itself.
    gate: Option<Gate>,
}

impl<S> Retry<S> {
    pub(super) fn new(inner: S, policy: RetryPolicy, carriage: Carriage) -> Retry<S> {
        Retry {
            inner,
            policy,
            carriage: Some(carriage),
            gate: None,
        }
    }

    /// Retries calls to `inner`, a rate-limit gate: it takes the link the
    /// retry loop offers while it calls, so there is nothing to learn (a
    /// stack made per request, as a client middleware makes it, pays for
    /// no first request's probe).
    pub(crate) fn over_gate(inner: S, policy: RetryPolicy, gate: Gate) -> Retry<S> {
        Retry {
            inner,
            policy,
            carriage: None,
            gate: Some(gate),
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, ResBody> Service<Request<B>> for Retry<S>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResBody>> + Clone,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<RetryBody<ResBody>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, B, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let body = ReplayBody::new(body, self.policy.max_replay_body());
        // The driven instance was made ready by `poll_ready`; keep a clone
        // in its place and send the first attempt through the ready one.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let carry = match (&self.gate, &self.carriage) {
            (Some(gate), _) if gate.is_quiet() => Carry::Quiet(gate.clone()),
            (_, carriage) => carriage.as_ref().map_or(Carry::Offer, Carriage::next),
        };
        ResponseFuture::start(ready, parts, body, self.policy.clone(), carry)
    }
}
