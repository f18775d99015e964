//! [`ResponseFuture`]: wait for the slot, send, learn from a 429.

use super::gate::{Gate, GateError};
use crate::error::BoxError;
use crate::hint::parse_hint;
use http::{Response, StatusCode};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::SystemTime;
use tokio::time::{Instant, Sleep};
use tower::Service;

pin_project! {
    /// The future returned by [`RateLimit`](super::RateLimit). Dropping it
    /// while it waits for its slot sends nothing.
    pub struct ResponseFuture<S, Req>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S::Future>,
        pending: Option<(S, Req)>,
        gate: Option<(Gate, u64, Instant)>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Waiting { #[pin] sleep: Sleep },
        Readying,
        Calling { #[pin] future: F },
        Refused { error: Option<GateError> },
    }
}

impl<S: Service<Req>, Req> ResponseFuture<S, Req> {
    pub(super) fn waiting(service: S, request: Req, slot: Instant, gate: Gate, key: u64) -> Self {
        ResponseFuture {
            state: State::Waiting {
                sleep: tokio::time::sleep_until(slot),
            },
            pending: Some((service, request)),
            gate: Some((gate, key, slot)),
        }
    }

    pub(super) fn refused(error: GateError) -> Self {
        ResponseFuture {
            state: State::Refused { error: Some(error) },
            pending: None,
            gate: None,
        }
    }
}

impl<S: Service<Req>, Req> std::fmt::Debug for ResponseFuture<S, Req> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S, Req, ResBody> Future for ResponseFuture<S, Req>
where
    S: Service<Req, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
{
    type Output = Result<Response<ResBody>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Refused { error } => {
                    let error = error.take().map_or_else(
                        || "rate limit future polled after completion".into(),
                        BoxError::from,
                    );
                    return Poll::Ready(Err(error));
                }
                StateProj::Waiting { sleep } => {
                    ready!(sleep.poll(cx));
                    this.state.set(State::Readying);
                }
                StateProj::Readying => {
                    let Some((service, _)) = this.pending.as_mut() else {
                        return Poll::Ready(
                            Err("rate limit future polled after completion".into()),
                        );
                    };
                    ready!(service.poll_ready(cx)).map_err(Into::into)?;
                    let Some((mut service, request)) = this.pending.take() else {
                        return Poll::Ready(
                            Err("rate limit future polled after completion".into()),
                        );
                    };
                    let future = service.call(request);
                    this.state.set(State::Calling { future });
                }
                StateProj::Calling { future } => {
                    let response = ready!(future.poll(cx)).map_err(Into::into)?;
                    let Some((gate, key, slot)) = this.gate.as_ref() else {
                        return Poll::Ready(Ok(response));
                    };
                    if response.status() == StatusCode::TOO_MANY_REQUESTS {
                        let now = Instant::now();
                        gate.throttled(*key, *slot, now);
                        let hint = parse_hint(response.headers(), None, SystemTime::now());
                        // The provider's wait is about the key: every later send waits too.
                        if let Some(wait) = hint.wait {
                            gate.hold(*key, now, wait.duration);
                        }
                    } else if response.status().is_success() {
                        gate.succeeded(*key, Instant::now());
                    }
                    return Poll::Ready(Ok(response));
                }
            }
        }
    }
}
