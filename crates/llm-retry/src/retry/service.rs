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
    /// What is below: the way requests carry their gate link, learned
    /// from the first ones, or the gate itself, right below.
    below: Below,
}

/// What a [`Retry`] knows of the stack below it.
#[derive(Debug, Clone)]
enum Below {
    /// Learned from its first requests.
    Learned(Carriage),
    /// A gate right below (a `ClientLayer`'s), which the offer reaches.
    Gate(Gate),
}

impl<S> Retry<S> {
    pub(super) fn new(inner: S, policy: RetryPolicy, carriage: Carriage) -> Retry<S> {
        Retry {
            inner,
            policy,
            below: Below::Learned(carriage),
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
            below: Below::Gate(gate),
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
        let carry = match &self.below {
            Below::Learned(carriage) => carriage.next(),
            // While it is quiet, the loop notes its sends itself; after,
            // the gate takes the link the loop offers.
            Below::Gate(gate) if gate.is_quiet() => Carry::Quiet(gate.clone()),
            Below::Gate(_) => Carry::Offer,
        };
        ResponseFuture::start(ready, parts, body, self.policy.clone(), carry)
    }
}
