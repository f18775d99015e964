//! [`ResponseFuture`]: wait for the slot, send, learn from a 429.

use super::concurrency::{Flight, InFlight};
use super::error::GateError;
use super::gate::{Booking, Fleet, Gate, Reserved};
use super::link::GateLink;
use super::shared::TurnFuture;
use crate::error::BoxError;
use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::{AcquireError, Notify, OwnedSemaphorePermit};
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
        state: State<S::Future, Queue<S, Req>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, Q> {
        // Before its call: waiting for its turn, a slot in flight or its
        // service; or refused.
        Queued { #[pin] queue: Q },
        // Called: what is left of the send is its answer. The queue (the
        // request while it waited, the booking) is gone, so the future
        // of a send that went at once is the size of the inner one.
        Calling {
            #[pin] future: F,
            // Counts the send in flight, when no retry loop above judges it.
            in_flight: Option<InFlight>,
        },
    }
}

pin_project! {
    /// A send before its call.
    struct Queue<S, Req> {
        #[pin]
        step: Step,
        pending: Option<(S, Req)>,
        gate: Option<Ticket>,
        // The slot under the key's in-flight ceiling, once taken.
        slot: Option<OwnedSemaphorePermit>,
        // Whether the send waited past its booked slot (for that slot, or
        // for the fleet's turn): then it is dated when it goes.
        waited_for_slot: bool,
    }
}

/// The error of a future polled again once it completed.
const DONE: &str = "rate limit future polled after completion";

/// Waiting for a slot under an overloaded key's in-flight ceiling.
type Acquire = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// What a send needs to check its place again, and to tell the retry loop
/// above that it went.
struct Ticket {
    gate: Gate,
    key: u64,
    booking: Booking,
    link: Option<GateLink>,
    /// The key's sends in flight, which this one joins when it goes
    /// (moved into its count then): `None` once the send was made (past
    /// its turn it may still wait for a slot in flight).
    flight: Option<Arc<Flight>>,
    /// Until asked, once its turn came here: the fleet, where the gate
    /// shares (for a hold another replica set, and its turns in the key's
    /// shared paces).
    fleet: Option<Fleet>,
}

impl Drop for Ticket {
    /// A send dropped (or refused) before it was sent gives up what it
    /// booked, so the sends queued behind it do not wait for it.
    fn drop(&mut self) {
        if self.flight.is_some() {
            self.gate.abandon(self.key, &self.booking, Instant::now());
        }
    }
}

pin_project! {
    #[project = StepProj]
    enum Step {
        Waiting {
            #[pin] sleep: Sleep,
            // Fires when the key's learned rate rose or news of its window
            // came: the slot may be earlier.
            #[pin] woken: Option<OwnedNotified>,
        },
        // Its turn came; an overloaded key also needs a slot in flight.
        Admitting {
            acquire: Option<Acquire>,
            deadline: Option<Pin<Box<Sleep>>>,
        },
        Readying,
        // Refused by the gate, or its send's service failed to be ready.
        Refused { error: Option<BoxError> },
        // Its turn came here; asking the fleet how long it waits there
        // (a hold another replica set, its turn in a shared pace), then
        // waiting.
        Pacing { wait: TurnFuture, sleep: Option<Pin<Box<Sleep>>> },
    }
}

impl<S: Service<Req>, Req> ResponseFuture<S, Req> {
    /// A send queued on `key`: sent when its booking says so.
    pub(super) fn queued(
        service: S,
        request: Req,
        gate: Gate,
        key: u64,
        (booking, flight, woken, fleet): Reserved,
        link: Option<GateLink>,
    ) -> Self {
        let mut ticket = Ticket {
            gate,
            key,
            booking,
            link,
            flight: Some(flight),
            fleet,
        };
        let step = if booking.released {
            ticket.after_turn()
        } else {
            Step::Waiting {
                sleep: tokio::time::sleep_until(booking.slot),
                woken,
            }
        };
        Self::queue(step, Some((service, request)), Some(ticket))
    }

    fn queue(step: Step, pending: Option<(S, Req)>, gate: Option<Ticket>) -> Self {
        let queue = Queue {
            step,
            pending,
            gate,
            slot: None,
            waited_for_slot: false,
        };
        ResponseFuture {
            state: State::Queued { queue },
        }
    }

    /// A send the retry loop above noted itself, while the gate was
    /// quiet: it goes at once, as if there were no gate. Its service is
    /// readied here when it is ready now (called at once), else by the
    /// future; a failure to be ready is the send's.
    pub(super) fn passed(mut service: S, request: Req) -> Self
    where
        S::Error: Into<BoxError>,
    {
        let waker = crate::noop_waker::noop_waker();
        match service.poll_ready(&mut Context::from_waker(&waker)) {
            Poll::Ready(Ok(())) => ResponseFuture {
                state: State::Calling {
                    future: service.call(request),
                    in_flight: None,
                },
            },
            Poll::Ready(Err(error)) => Self::refused_with(error.into()),
            Poll::Pending => Self::queue(Step::Readying, Some((service, request)), None),
        }
    }

    /// A send the gate refused at once: logged and counted.
    pub(super) fn refused(refused: GateError) -> Self {
        Self::refused_with(refusal(refused))
    }

    fn refused_with(error: BoxError) -> Self {
        Self::queue(Step::Refused { error: Some(error) }, None, None)
    }
}

impl Step {
    /// The send's turn came: take a slot in flight if the key needs one.
    fn admitting() -> Self {
        Step::Admitting {
            acquire: None,
            deadline: None,
        }
    }
}

impl Ticket {
    /// The send's turn came here: where the gate shares, it asks the
    /// fleet next, within its bounds.
    fn after_turn(&mut self) -> Step {
        let (Some((pace, tokens)), Some(store)) = (self.fleet.take(), &self.gate.shared) else {
            return Step::admitting();
        };
        let bounds = self.booking.bounds;
        let max_wait = bounds
            .deadline
            .map(|at| at.saturating_duration_since(Instant::now()));
        let wait = store.turn(self.key, pace, tokens, max_wait, bounds.max_server_wait);
        Step::Pacing { wait, sleep: None }
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
                StateProj::Queued { queue } => {
                    let (future, in_flight) = ready!(queue.poll_call(cx))?;
                    this.state.set(State::Calling { future, in_flight });
                }
                StateProj::Calling { future, in_flight } => {
                    let response = ready!(future.poll(cx));
                    in_flight.take();
                    return Poll::Ready(response.map_err(Into::into));
                }
            }
        }
    }
}

impl<S, Req> Queue<S, Req>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
{
    /// Waits for the send's turn and calls it: its future, and its count
    /// in flight when no retry loop above judges it.
    #[allow(clippy::type_complexity)]
    fn poll_call(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(S::Future, Option<InFlight>), BoxError>> {
        let mut this = self.project();
        loop {
            match this.step.as_mut().project() {
                StepProj::Refused { error } => {
                    return Poll::Ready(Err(error.take().unwrap_or_else(|| DONE.into())));
                }
                StepProj::Waiting {
                    mut sleep,
                    woken: mut notified,
                } => {
                    let woken = notified
                        .as_mut()
                        .as_pin_mut()
                        .is_some_and(|notified| notified.poll(cx).is_ready());
                    if !woken && sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let Some(ticket) = this.gate.as_mut() else {
                        this.step.set(Step::admitting());
                        continue;
                    };
                    if woken {
                        notified.set(ticket.gate.woken(ticket.key).map(Notify::notified_owned));
                    }
                    // The rate or a hold may have moved the slot since it
                    // was computed: look again.
                    let now = Instant::now();
                    match ticket.gate.check(ticket.key, &mut ticket.booking, now) {
                        Ok(None) => this.step.set(ticket.after_turn()),
                        Ok(Some(slot)) => sleep.reset(slot),
                        Err(refused) => {
                            this.pending.take();
                            return refuse(refused);
                        }
                    }
                }
                StepProj::Pacing { wait, sleep } => {
                    if let Some(sleeping) = sleep.as_mut() {
                        ready!(sleeping.as_mut().poll(cx));
                        this.step.set(Step::admitting());
                        continue;
                    }
                    let wait = ready!(wait.as_mut().poll(cx));
                    if wait.is_ok_and(|wait| wait.is_zero()) {
                        this.step.set(Step::admitting());
                        continue;
                    }
                    // Past the key's own turn (already let go): the send is
                    // dated when it goes. One too late for the deadline (or
                    // for an `Instant`) took no turn.
                    let at = wait.ok().and_then(|wait| Instant::now().checked_add(wait));
                    let Some(at) = at else {
                        this.pending.take();
                        this.step.set(Step::Refused { error: None });
                        let wait = wait.unwrap_or_else(|wait| wait);
                        return refuse(GateError::PastDeadline { wait });
                    };
                    *this.waited_for_slot = true;
                    *sleep = Some(Box::pin(tokio::time::sleep_until(at)));
                }
                StepProj::Admitting { acquire, deadline } => {
                    if acquire.is_none() {
                        let slots = this.gate.as_ref().and_then(|t| t.flight.as_ref()?.slots());
                        let Some(slots) = slots else {
                            this.step.set(Step::Readying);
                            continue;
                        };
                        // First in, first out among the key's waiting sends.
                        *acquire = Some(Box::pin(slots.acquire_owned()));
                        *deadline = this
                            .gate
                            .as_ref()
                            .and_then(|t| t.booking.bounds.deadline)
                            .map(|at| Box::pin(tokio::time::sleep_until(at)));
                    }
                    if let Some(waiting) = acquire.as_mut() {
                        if let Poll::Ready(permit) = waiting.as_mut().poll(cx) {
                            // Closed: the ceiling stood down, and the send goes without a slot.
                            *this.slot = permit.ok();
                            this.step.set(Step::Readying);
                            continue;
                        }
                        *this.waited_for_slot = true;
                    }
                    if let Some(deadline) = deadline.as_mut() {
                        if deadline.as_mut().poll(cx).is_ready() {
                            this.pending.take();
                            // Out of the slot queue at once.
                            this.step.set(Step::Refused { error: None });
                            return refuse(GateError::PastDeadline {
                                wait: Duration::ZERO,
                            });
                        }
                    }
                    return Poll::Pending;
                }
                StepProj::Readying => {
                    let (service, _) = this.pending.as_mut().ok_or(DONE)?;
                    ready!(service.poll_ready(cx)).map_err(Into::into)?;
                    let (mut service, request) = this.pending.take().ok_or(DONE)?;
                    // Counted in flight from before its call.
                    let mut in_flight = this
                        .gate
                        .as_mut()
                        .and_then(|t| Some(InFlight::start(t.flight.take()?, this.slot.take())));
                    let future = service.call(request);
                    // The retry loop above judges the answer and tells the
                    // key what it meant (a 429's named wait holds the key);
                    // the send counts in flight until then. Without one, it
                    // counts until its answer comes.
                    let link = this.gate.as_ref().and_then(|t| Some((t, t.link.as_ref()?)));
                    if let (Some((ticket, link)), Some(counted)) = (link, in_flight.take()) {
                        // A send is dated by its booked slot (the pace it
                        // went under), or by now when it also waited for a
                        // slot in flight: news of a send held back is news.
                        let at = if *this.waited_for_slot {
                            Instant::now()
                        } else {
                            ticket.booking.slot
                        };
                        // The retry loop times the attempt from here.
                        link.mark_called();
                        let mark = ticket.booking.mark;
                        link.sent(&ticket.gate, ticket.key, at, mark, counted);
                    }
                    return Poll::Ready(Ok((future, in_flight)));
                }
            }
        }
    }
}

/// A send the gate refused: logged, counted, and the error.
fn refuse<T>(refused: GateError) -> Poll<Result<T, BoxError>> {
    Poll::Ready(Err(refusal(refused)))
}

/// A refusal logged and counted: the error.
fn refusal(refused: GateError) -> BoxError {
    tracing::warn!(error = %refused, "llm-retry: rate limit refused a send");
    crate::observe::gate_refusal(refused.label());
    refused.into()
}
