//! [`ResponseFuture`]: one logical request, attempt after attempt.

use super::attempt::{AttemptCtx, Step};
use super::peek::{PeekEnd, Peeked};
use super::RetryBody;
use crate::error::BoxError;
use crate::hooks::SharedHooks;
use crate::policy::{Outcome, RetryPolicy};
use crate::replay::ReplayBody;
use bytes::Bytes;
use http::{request, response, Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;
use tower::Service;

/// Shortest time allowed to read a failed response's body, even near the deadline.
const MIN_PEEK_TIME: Duration = Duration::from_secs(1);

pin_project! {
    /// The future returned by [`Retry`](super::Retry): resolves to the final
    /// response or one [`RetryError`](crate::RetryError).
    ///
    /// Dropping it stops everything at once, also in the middle of a wait.
    pub struct ResponseFuture<S, B, ResBody>
    where
        S: Service<Request<ReplayBody<B>>>,
    {
        #[pin]
        state: State<S::Future, ResBody>,
        service: S,
        ctx: AttemptCtx<B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, Res> {
        Calling { #[pin] future: F },
        Peeking {
            head: Option<response::Parts>,
            body: Option<Pin<Box<Res>>>,
            peeked: Peeked,
            timer: Pin<Box<Sleep>>,
        },
        Waiting { #[pin] sleep: Sleep },
        Readying,
        Done,
    }
}

impl<S, B, ResBody> std::fmt::Debug for ResponseFuture<S, B, ResBody>
where
    S: Service<Request<ReplayBody<B>>>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("attempts", &self.ctx.attempts())
            .finish_non_exhaustive()
    }
}

impl<S, B, ResBody> ResponseFuture<S, B, ResBody>
where
    S: Service<Request<ReplayBody<B>>> + Clone,
{
    pub(super) fn start(
        ready: &mut S,
        parts: request::Parts,
        body: ReplayBody<B>,
        policy: RetryPolicy,
        hooks: SharedHooks,
    ) -> ResponseFuture<S, B, ResBody> {
        let (ctx, first) = AttemptCtx::new(parts, body, policy, hooks);
        let future = {
            let _entered = ctx.span().enter();
            ready.call(first)
        };
        ResponseFuture {
            state: State::Calling { future },
            service: ready.clone(),
            ctx,
        }
    }
}

type Res<ResBody> = Response<RetryBody<ResBody>>;

impl<S, B, ResBody> Future for ResponseFuture<S, B, ResBody>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResBody>> + Clone,
    S::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    type Output = Result<Res<ResBody>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let ctx = this.ctx;
        let _entered = ctx.span().clone().entered();
        loop {
            match this.state.as_mut().project() {
                StateProj::Calling { future } => match ready!(future.poll(cx)) {
                    Ok(response) if !ctx.wants_body(response.status()) => {
                        let (head, body) = response.into_parts();
                        let outcome = Outcome::Response {
                            status: head.status,
                            headers: &head.headers,
                            body: None,
                        };
                        match ctx.judge(outcome) {
                            Step::Wait(delay) => this.state.set(State::Waiting {
                                sleep: tokio::time::sleep(delay),
                            }),
                            Step::Finish(report) => {
                                this.state.set(State::Done);
                                let mut res =
                                    Response::from_parts(head, RetryBody::passthrough(body));
                                res.extensions_mut().insert(report);
                                return Poll::Ready(Ok(res));
                            }
                        }
                    }
                    Ok(response) => {
                        let (head, body) = response.into_parts();
                        let timer =
                            Box::pin(tokio::time::sleep(ctx.remaining().max(MIN_PEEK_TIME)));
                        this.state.set(State::Peeking {
                            head: Some(head),
                            body: Some(Box::pin(body)),
                            peeked: Peeked::default(),
                            timer,
                        });
                    }
                    Err(error) => {
                        let error: BoxError = error.into();
                        match ctx.judge(Outcome::Error(&*error)) {
                            Step::Wait(delay) => this.state.set(State::Waiting {
                                sleep: tokio::time::sleep(delay),
                            }),
                            Step::Finish(report) => {
                                this.state.set(State::Done);
                                return Poll::Ready(Err(ctx.error(report, error)));
                            }
                        }
                    }
                },
                StateProj::Peeking {
                    head,
                    body,
                    peeked,
                    timer,
                } => {
                    let limit = ctx.peek_limit();
                    let end = match body.as_mut() {
                        Some(b) => match peeked.poll_fill(b.as_mut(), limit, cx) {
                            Poll::Ready(end) => end,
                            Poll::Pending => {
                                ready!(timer.as_mut().poll(cx));
                                PeekEnd::Full
                            }
                        },
                        None => PeekEnd::Complete,
                    };
                    let Some(head) = head.take() else {
                        this.state.set(State::Done);
                        continue;
                    };
                    let rest = match end {
                        PeekEnd::Complete => None,
                        PeekEnd::Full => body.take(),
                        PeekEnd::Failed(e) => {
                            // The body broke before its error could be read: a reset.
                            let error: BoxError = e.into();
                            match ctx.judge(Outcome::Error(&*error)) {
                                Step::Wait(delay) => this.state.set(State::Waiting {
                                    sleep: tokio::time::sleep(delay),
                                }),
                                Step::Finish(report) => {
                                    this.state.set(State::Done);
                                    return Poll::Ready(Err(ctx.error(report, error)));
                                }
                            }
                            continue;
                        }
                    };
                    let outcome = Outcome::Response {
                        status: head.status,
                        headers: &head.headers,
                        body: Some(peeked.window(limit)),
                    };
                    match ctx.judge(outcome) {
                        Step::Wait(delay) => this.state.set(State::Waiting {
                            sleep: tokio::time::sleep(delay),
                        }),
                        Step::Finish(report) => {
                            let prefix = std::mem::take(&mut peeked.bytes).freeze();
                            let trailers = peeked.trailers.take();
                            this.state.set(State::Done);
                            let mut res = Response::from_parts(
                                head,
                                RetryBody::peeked(prefix, trailers, rest),
                            );
                            res.extensions_mut().insert(report);
                            return Poll::Ready(Ok(res));
                        }
                    }
                }
                StateProj::Waiting { sleep } => {
                    ready!(sleep.poll(cx));
                    this.state.set(State::Readying);
                }
                StateProj::Readying => {
                    if let Err(error) = ready!(this.service.poll_ready(cx)) {
                        let error: BoxError = error.into();
                        let report = ctx.give_up_on_service_error();
                        this.state.set(State::Done);
                        return Poll::Ready(Err(ctx.error(report, error)));
                    }
                    let Some(request) = ctx.next_request() else {
                        let report = ctx.give_up_on_service_error();
                        this.state.set(State::Done);
                        return Poll::Ready(Err(ctx.error(report, "no request prepared".into())));
                    };
                    let future = this.service.call(request);
                    this.state.set(State::Calling { future });
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            }
        }
    }
}
