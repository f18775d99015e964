//! [`ResponseFuture`]: one logical request, attempt after attempt.

use super::account::{fails_even_with_response, Step};
use super::attempt::AttemptCtx;
use super::carry::Carry;
use super::peek::{PeekEnd, Peeked};
use super::RetryBody;
use crate::budget::WaitPermit;
use crate::error::BoxError;
use crate::policy::{CredentialsFuture, Outcome, RecoveryAction, RetryPolicy};
use crate::replay::ReplayBody;
use crate::report::{RetryReport, StopReason};
use bytes::Bytes;
use http::{request, response, Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower::Service;

/// Longest time spent reading a failed response's body before judging it on
/// its status, headers and what arrived: a stalled error body must not eat
/// the whole deadline.
const MAX_PEEK_TIME: Duration = Duration::from_secs(10);

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
        // Fires at the request's deadline: no attempt, refresh or wait for
        // readiness outlives it. Made (and boxed, to keep the future small)
        // the first time something is pending, so a call answered at once
        // pays for no timer.
        deadline: Timer,
        // Fires when the attempt in flight took its whole attempt timeout;
        // `attempt_until` is when, for the attempt in flight.
        attempt_timer: Timer,
        attempt_until: Option<Instant>,
        service: S,
        ctx: AttemptCtx<B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, Res> {
        Calling { #[pin] future: F },
        // Boxed: only failed responses are peeked, and the future stays
        // small for the calls that succeed.
        Peeking { peek: Box<Peek<Res>> },
        // The permit holds a place among the budget's waiting retries
        // until the wait ends or the future is dropped.
        Waiting { sleep: Pin<Box<Sleep>>, permit: Option<WaitPermit> },
        // Boxed with the answer that asked for them: rare, and the future
        // stays small.
        Refreshing { credentials: CredentialsFuture, asked: Box<Asked<Res>> },
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
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: Into<BoxError>,
{
    #[inline]
    /// The future of a request whose first attempt goes through `ready`,
    /// which then stays for the resends.
    pub(super) fn start(
        mut ready: S,
        parts: request::Parts,
        body: ReplayBody<B>,
        policy: RetryPolicy,
        carry: Carry,
    ) -> ResponseFuture<S, B, ResBody> {
        let mut parts = parts;
        let mut ctx = AttemptCtx::new(&mut parts, &body, policy, carry);
        let future = ctx.call(&mut ready, Request::from_parts(parts, body));
        ResponseFuture {
            state: State::Calling { future },
            deadline: None,
            attempt_timer: None,
            attempt_until: ctx.attempt_bound(),
            service: ready,
            ctx,
        }
    }
}

type Res<ResBody> = Response<RetryBody<ResBody>>;

/// A bound's timer, made the first time it is needed.
type Timer = Option<Pin<Box<Sleep>>>;

/// A failed response whose body is being read before it is judged.
struct Peek<Res> {
    head: Option<response::Parts>,
    body: Option<Pin<Box<Res>>>,
    peeked: Peeked,
    timer: Pin<Box<Sleep>>,
}

/// What asked for fresh credentials: its reason, and the response (a 401)
/// that is the answer should none come. An attempt that failed with no
/// response leaves none: its answer is then an error.
struct Asked<ResBody> {
    reason: String,
    response: Option<Res<ResBody>>,
}

/// Moves the state machine on after a judged response; `Some` is the
/// answer. A response that asks for fresh credentials is kept, to be the
/// answer should none come.
// Always inlined, the response handed straight to where it goes: built
// into a closure for `advance` instead, it was copied on every success
// (measured: about 100 instructions a call; with `respond` always
// inlined too, 45 fewer than before the refresh kept its response).
#[inline(always)]
fn advance_with<F, ResBody>(
    step: Step,
    mut state: Pin<&mut State<F, ResBody>>,
    head: response::Parts,
    body: RetryBody<ResBody>,
) -> Option<Result<Res<ResBody>, BoxError>> {
    match step {
        Step::Served => {
            state.set(State::Done);
            Some(respond(head, body, None))
        }
        Step::Finish(report) => {
            state.set(State::Done);
            Some(respond(head, body, Some(report)))
        }
        Step::Refresh(credentials, reason) => {
            let response = Some(Response::from_parts(head, body));
            ask(state, credentials, reason, response);
            None
        }
        Step::Wait(delay, permit) => {
            wait(state, delay, permit);
            None
        }
    }
}

/// Moves the state machine on after a judged outcome that is no response;
/// `Some` is the answer.
#[inline]
fn advance<F, ResBody>(
    step: Step,
    mut state: Pin<&mut State<F, ResBody>>,
    finish: impl FnOnce(Option<RetryReport>) -> Result<Res<ResBody>, BoxError>,
) -> Option<Result<Res<ResBody>, BoxError>> {
    match step {
        Step::Wait(delay, permit) => wait(state, delay, permit),
        Step::Refresh(credentials, reason) => ask(state, credentials, reason, None),
        Step::Served => {
            state.as_mut().set(State::Done);
            return Some(finish(None));
        }
        Step::Finish(report) => {
            state.as_mut().set(State::Done);
            return Some(finish(Some(report)));
        }
    }
    None
}

/// Sleeps `delay` (holding the budget's wait permit, if any) before the
/// next send; none at all goes at once.
#[inline]
fn wait<F, ResBody>(
    mut state: Pin<&mut State<F, ResBody>>,
    delay: Duration,
    permit: Option<WaitPermit>,
) {
    if delay.is_zero() {
        state.set(State::Readying);
    } else {
        state.set(State::Waiting {
            permit,
            sleep: Box::pin(tokio::time::sleep(delay)),
        });
    }
}

/// Awaits fresh credentials, keeping the response that asked for them
/// (none for an attempt that failed without one).
#[cold]
fn ask<F, ResBody>(
    mut state: Pin<&mut State<F, ResBody>>,
    credentials: CredentialsFuture,
    reason: String,
    response: Option<Res<ResBody>>,
) {
    let asked = Box::new(Asked { reason, response });
    state.set(State::Refreshing { credentials, asked });
}

/// Judges an attempt that failed with `error` (its own, or its bound's).
fn failed<B, F, ResBody>(
    ctx: &mut AttemptCtx<B>,
    state: Pin<&mut State<F, ResBody>>,
    error: BoxError,
) -> Option<Result<Res<ResBody>, BoxError>> {
    let step = ctx.judge(Outcome::Error(&*error));
    advance(step, state, |report| Err(ctx.error(report, Some(error))))
}

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
        let _entered = super::entered::EnteredById::enter(ctx.span());
        loop {
            let answer = match this.state.as_mut().project() {
                StateProj::Calling { future } => match ctx.offering(|| future.poll(cx)) {
                    Poll::Pending => {
                        if let Some(until) = *this.attempt_until {
                            // A gate below took the attempt: its time counts
                            // from the gate's call, so the bound may move.
                            if let Some(later) = ctx.attempt_moved(until) {
                                *this.attempt_until = Some(later);
                                *this.attempt_timer = None;
                            }
                        }
                        let bounds = [
                            (&mut *this.deadline, ctx.deadline()),
                            (&mut *this.attempt_timer, *this.attempt_until),
                        ];
                        if !bound_passed(bounds, cx) {
                            return Poll::Pending;
                        }
                        let cut = Box::new(crate::rate_limit::link::attempt_cut());
                        failed(ctx, this.state.as_mut(), cut)
                    }
                    Poll::Ready(Ok(response)) if !ctx.wants_body(response.status()) => {
                        let (head, body) = response.into_parts();
                        let outcome = Outcome::Response {
                            status: head.status,
                            headers: &head.headers,
                            body: None,
                        };
                        let step = ctx.judge(outcome);
                        advance_with(
                            step,
                            this.state.as_mut(),
                            head,
                            RetryBody::passthrough(body),
                        )
                    }
                    Poll::Ready(Ok(response)) => {
                        let (head, body) = response.into_parts();
                        let timer =
                            Box::pin(tokio::time::sleep(ctx.remaining().min(MAX_PEEK_TIME)));
                        let peeking = State::Peeking {
                            peek: Box::new(Peek {
                                head: Some(head),
                                body: Some(Box::pin(body)),
                                peeked: Peeked::default(),
                                timer,
                            }),
                        };
                        this.state.set(peeking);
                        None
                    }
                    Poll::Ready(Err(error)) => failed(ctx, this.state.as_mut(), error.into()),
                },
                StateProj::Peeking { peek } => {
                    let Peek {
                        head,
                        body,
                        peeked,
                        timer,
                    } = &mut **peek;
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
                        return Poll::Ready(Err("retry future polled after completion".into()));
                    };
                    match end {
                        PeekEnd::Failed(e) => {
                            // The status and headers still decide (a 404 stays final,
                            // `x-should-retry` and named waits still count); the
                            // broken body only means there is no response to hand over.
                            let error: BoxError = e.into();
                            let outcome = Outcome::Response {
                                status: head.status,
                                headers: &head.headers,
                                body: Some(peeked.window(limit)),
                            };
                            let step = ctx.judge(outcome);
                            advance(step, this.state.as_mut(), |report| {
                                Err(ctx.error(report, Some(error)))
                            })
                        }
                        PeekEnd::Complete | PeekEnd::Full => {
                            let rest = if matches!(end, PeekEnd::Full) {
                                body.take()
                            } else {
                                None
                            };
                            let outcome = Outcome::Response {
                                status: head.status,
                                headers: &head.headers,
                                body: Some(peeked.window(limit)),
                            };
                            let step = ctx.judge(outcome);
                            let prefix = std::mem::take(&mut peeked.bytes).freeze();
                            let trailers = peeked.trailers.take();
                            let body = RetryBody::peeked(prefix, trailers, rest);
                            advance_with(step, this.state.as_mut(), head, body)
                        }
                    }
                }
                StateProj::Waiting { sleep, .. } => {
                    ready!(sleep.as_mut().poll(cx));
                    this.state.set(State::Readying);
                    None
                }
                StateProj::Refreshing { credentials, asked } => {
                    let fresh = ready!(poll_bounded(
                        credentials.as_mut().poll(cx),
                        [(&mut *this.deadline, ctx.deadline())],
                        cx,
                        || "no credentials before the request's deadline".into(),
                    ));
                    let prepared = match fresh {
                        Ok(headers) => {
                            ctx.apply_credentials(headers, std::mem::take(&mut asked.reason))
                        }
                        Err(error) => Err(StopReason::RecoveryFailed {
                            action: RecoveryAction::RefreshCredentials,
                            reason: error.to_string(),
                        }),
                    };
                    match prepared {
                        Ok(()) => {
                            this.state.set(State::Readying);
                            None
                        }
                        Err(stop) => {
                            let report = ctx.finish(stop);
                            let response = asked.response.take();
                            this.state.set(State::Done);
                            // The response that asked is the answer, as
                            // any other final one: with its report.
                            Some(match response {
                                Some(response) => {
                                    let (head, body) = response.into_parts();
                                    respond(head, body, Some(report))
                                }
                                None => Err(ctx.error(Some(report), None)),
                            })
                        }
                    }
                }
                StateProj::Readying => {
                    let readiness = ready!(poll_bounded(
                        this.service.poll_ready(cx).map_err(Into::into),
                        [(&mut *this.deadline, ctx.deadline())],
                        cx,
                        || "the service was not ready for a resend before the request's deadline"
                            .into(),
                    ));
                    if let Err(error) = readiness {
                        let report = ctx.give_up_on_service_error(Instant::now());
                        this.state.set(State::Done);
                        return Poll::Ready(Err(ctx.error(Some(report), Some(error))));
                    }
                    let Some(request) = ctx.next_request() else {
                        let report = ctx.give_up_on_service_error(Instant::now());
                        this.state.set(State::Done);
                        return Poll::Ready(Err(
                            ctx.error(Some(report), Some("no request prepared".into()))
                        ));
                    };
                    ctx.begin_attempt();
                    let future = ctx.call(this.service, request);
                    *this.attempt_until = ctx.attempt_bound();
                    *this.attempt_timer = None;
                    this.state.set(State::Calling { future });
                    None
                }
                StateProj::Done => Some(Err("retry future polled after completion".into())),
            };
            if let Some(answer) = answer {
                return Poll::Ready(answer);
            }
        }
    }
}

/// `polled`, unless it is pending and one of `bounds` (a timer, made on
/// first use, and the instant it fires at) has passed: then the error `cut`
/// makes.
#[inline]
fn poll_bounded<T, const N: usize>(
    polled: Poll<Result<T, BoxError>>,
    bounds: [(&mut Timer, Option<Instant>); N],
    cx: &mut Context<'_>,
    cut: impl FnOnce() -> BoxError,
) -> Poll<Result<T, BoxError>> {
    if polled.is_ready() {
        return polled;
    }
    if bound_passed(bounds, cx) {
        return Poll::Ready(Err(cut()));
    }
    Poll::Pending
}

/// Whether one of `bounds` (a timer, made on first use, and the instant it
/// fires at) has passed; each one not passed is registered with `cx`.
#[inline]
fn bound_passed<const N: usize>(
    bounds: [(&mut Timer, Option<Instant>); N],
    cx: &mut Context<'_>,
) -> bool {
    for (timer, at) in bounds {
        let Some(at) = at else { continue };
        let sleep = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if sleep.as_mut().poll(cx).is_ready() {
            return true;
        }
    }
    false
}

/// The final response with its report (none for a first-try success),
/// unless the stop must be an error.
#[inline(always)]
fn respond<ResBody>(
    head: response::Parts,
    body: RetryBody<ResBody>,
    report: Option<RetryReport>,
) -> Result<Res<ResBody>, BoxError> {
    let mut response = Response::from_parts(head, body);
    if let Some(report) = report {
        if let Some(error) = fails_even_with_response(&report) {
            return Err(error);
        }
        response.extensions_mut().insert(report);
    }
    Ok(response)
}
