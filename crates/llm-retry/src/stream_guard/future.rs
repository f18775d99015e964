//! [`ResponseFuture`]: the inner call, then the hold.

use super::hold::{Hold, Verdict};
use super::layer::GuardConfig;
use super::{GuardedBody, StreamCommit};
use crate::error::BoxError;
use bytes::Bytes;
use http::{response, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

pin_project! {
    /// The future returned by [`StreamGuard`](super::StreamGuard).
    pub struct ResponseFuture<F, B> {
        #[pin]
        state: State<F, B>,
        config: Arc<GuardConfig>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        Calling { #[pin] future: F },
        // Boxed: only a guarded stream holds, and the future of every
        // other response stays the size of the inner one.
        Holding { held: Box<Holding<B>> },
    }
}

/// A guarded stream's head and body, held until its first event decides.
struct Holding<B> {
    head: Option<response::Parts>,
    hold: Option<Hold<B>>,
}

impl<F, B> ResponseFuture<F, B> {
    pub(super) fn new(future: F, config: Arc<GuardConfig>) -> ResponseFuture<F, B> {
        ResponseFuture {
            state: State::Calling { future },
            config,
        }
    }
}

impl<F, B> std::fmt::Debug for ResponseFuture<F, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Calling { .. } => "calling",
            State::Holding { .. } => "holding",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<F, E, B> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response<GuardedBody<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Calling { future } => {
                    let response = ready!(future.poll(cx)).map_err(Into::into)?;
                    if !this.config.guards(response.status(), response.headers()) {
                        return Poll::Ready(Ok(response.map(GuardedBody::passthrough)));
                    }
                    let (head, body) = response.into_parts();
                    let hold = Hold::new(body, this.config);
                    this.state.set(State::Holding {
                        held: Box::new(Holding {
                            head: Some(head),
                            hold: Some(hold),
                        }),
                    });
                }
                StateProj::Holding { held } => {
                    let Holding { head, hold } = &mut **held;
                    let Some(active) = hold.as_mut() else {
                        return Poll::Ready(Err("stream guard polled after completion".into()));
                    };
                    let verdict = ready!(active.poll_verdict(this.config, cx));
                    let (Some(head), Some(hold)) = (head.take(), hold.take()) else {
                        return Poll::Ready(Err("stream guard polled after completion".into()));
                    };
                    return Poll::Ready(match verdict {
                        Verdict::Fail(error) => {
                            Err(Box::new(error.with_head(head.status, head.headers)))
                        }
                        Verdict::Release => {
                            let commit = StreamCommit::default();
                            let body = GuardedBody::released(
                                hold.held,
                                hold.trailers,
                                hold.body,
                                commit.clone(),
                            );
                            let mut response = Response::from_parts(head, body);
                            response.extensions_mut().insert(commit);
                            Ok(response)
                        }
                    });
                }
            }
        }
    }
}
