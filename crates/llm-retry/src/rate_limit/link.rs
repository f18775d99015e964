//! What the retry loop and the gate under it share for one logical request.
//!
//! The retry loop offers a [`GateLink`] to the gate it calls (see
//! [`offer`](super::offer)); the gate reads the request's bounds from it and leaves a note of each send it let
//! through. Once the retry policy has judged the attempt, the loop hands the
//! gate the policy's [`KeyNews`]: the gate never reads a response itself.

use super::concurrency::InFlight;
use super::gate::{Gate, TokenMark};
use super::key::{key_of, Head};
use super::lock;
use crate::hint::{RequestWindow, TokenWindow};
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// What an attempt's judged outcome says about its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum KeyNews {
    /// Nothing: the outcome says nothing about the key's rate.
    None,
    /// The key served the send, and its answer stated the provider's
    /// request window: the gate sends no more than that before it resets.
    Served {
        /// The window the answer's rate-limit headers stated, if any.
        window: Option<RequestWindow>,
        /// The token quota they stated, if any.
        tokens: Option<TokenWindow>,
    },
    /// The key refused the send.
    Throttled {
        /// The wait the provider named for the key, if any; the gate holds
        /// the key for it, up to the request's longest honoured wait.
        wait: Option<Duration>,
        /// Whether the refusal is news about the request rate. A 429 whose
        /// headers say a token quota ran out (only it, or with fewer tokens
        /// left than the send booked) is not: the gate keeps its learned rate.
        rate: bool,
        /// Whether the named wait is the key's: the gate holds every send
        /// of the key (and model) for it. A token refusal of a send that
        /// booked its tokens is the request's alone: its resend books them
        /// again, and smaller sends keep flowing.
        holds_key: bool,
        /// Whether the wait was named in whole seconds (`Retry-After`, an
        /// HTTP-date, Anthropic's reset): an upper bound, rounded up.
        whole_seconds: bool,
        /// The window the refusal's rate-limit headers stated, if any.
        window: Option<RequestWindow>,
        /// The token quota they stated, if any.
        tokens: Option<TokenWindow>,
        /// Whether the server forbade retrying it (`x-should-retry:
        /// false`): each refusal ends a request, so the gate never probes
        /// the key above the rate that drew one.
        final_answer: bool,
    },
    /// The key is overloaded (a `529`, an `overloaded_error`): it holds
    /// too many of the key's sends at once. The gate lowers how many may be
    /// in flight, not the send rate.
    Overloaded,
}

/// What the gate does about the resend of a send it judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum GateWait {
    /// Nothing: the request waits its own wait.
    #[default]
    Own,
    /// The key is held for all of the rate limit's named wait: a resend
    /// waits in the gate's queue.
    KeyHeld,
    /// The overloaded key's in-flight ceiling meters the resend: it waits
    /// for a slot.
    SlotMetered,
}

/// What a gate made of a send, for the policy that judges its outcome.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GateSend {
    /// The gate paces the send's key (a quota or a learned rate).
    pub(crate) paced: bool,
    /// The tokens the send booked under its key's token quota (0: none).
    pub(crate) booked_tokens: u64,
    /// What the gate did about the resend, once it heard the news.
    pub(crate) wait: GateWait,
}

/// Shared by the retry loop and the gate for one logical request.
#[derive(Clone)]
pub(crate) struct GateLink(Arc<Shared>);

struct Shared {
    deadline: Option<Instant>,
    max_server_wait: Duration,
    attempt_timeout: Option<Duration>,
    /// A gate took the last attempt: the attempt's time counts from the
    /// gate's call of the stack under it, not from its queue.
    gated: AtomicBool,
    /// When the gate called the stack under it for the last attempt
    /// (recorded only under an attempt timeout).
    called: Mutex<Option<Instant>>,
    /// A gate took the link from the retry loop's offer (not only from the
    /// request's extensions).
    offered: AtomicBool,
    sent: Mutex<Option<Sent>>,
    /// What a token-paced key estimates the send's cost from.
    estimate: Mutex<Estimate>,
    /// Its last sends were overloaded after each took a slot under the
    /// key's in-flight ceiling, this many in a row.
    slotted_overloads: AtomicU32,
    /// The wait its provider named it, when its resend waits in the gate's
    /// queue: the resend goes no sooner, even if the key's hold ends.
    not_before: Mutex<Option<Instant>>,
}

/// A request body, and the token cost and model read from it.
#[derive(Default)]
struct Estimate {
    body: Option<Bytes>,
    cost: Option<u64>,
    model: Option<Option<Bytes>>,
}

/// A send the gate let through, waiting for the policy's verdict.
pub(crate) struct Sent {
    gate: Gate,
    /// Its key; `None` for a quiet gate's send, keyed only if news comes.
    key: Option<u64>,
    at: Instant,
    /// The tokens it booked under the key's stated token quota, and what
    /// its answer's count of them is read against.
    tokens: TokenMark,
    /// Counts the send in flight until its answer is judged.
    in_flight: InFlight,
}

impl GateLink {
    pub(crate) fn new(bounds: super::offer::LinkBounds, body: Option<Bytes>) -> GateLink {
        GateLink(Arc::new(Shared {
            deadline: bounds.deadline,
            max_server_wait: bounds.max_server_wait,
            attempt_timeout: bounds.attempt_timeout,
            gated: AtomicBool::new(false),
            called: Mutex::new(None),
            offered: AtomicBool::new(false),
            sent: Mutex::new(None),
            estimate: Mutex::new(Estimate {
                body,
                ..Estimate::default()
            }),
            slotted_overloads: AtomicU32::new(0),
            not_before: Mutex::new(None),
        }))
    }

    /// Whether `other` is this very link.
    pub(super) fn same(&self, other: &GateLink) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The request body is `bytes`, whole (before its first send, or as a
    /// recovery rewrote it for the next).
    pub(crate) fn set_body(&self, bytes: Bytes) {
        *lock(&self.0.estimate) = Estimate {
            body: Some(bytes),
            ..Estimate::default()
        };
    }

    /// The model the request body names (its raw JSON value), read once
    /// per body; `None` when the body was not whole or names none.
    pub(super) fn model(&self) -> Option<Bytes> {
        let mut estimate = lock(&self.0.estimate);
        let Estimate { body, model, .. } = &mut *estimate;
        model
            .get_or_insert_with(|| {
                let body = body.as_ref()?;
                crate::recover::skimmed_model(body).map(|raw| body.slice_ref(raw))
            })
            .clone()
    }

    /// The request's token cost, estimated from its body once per body (its
    /// output cap plus a token per four bytes, as [`TokenCost::estimate`](super::TokenCost::estimate)),
    /// or 0 when the body was not whole or names no output cap.
    pub(super) fn estimated_cost(&self) -> u64 {
        let mut estimate = lock(&self.0.estimate);
        let Estimate { body, cost, .. } = &mut *estimate;
        *cost.get_or_insert_with(|| {
            body.as_deref()
                .and_then(super::TokenCost::estimate)
                .map_or(0, |c| c.0)
        })
    }

    /// The gate called the stack under it for the attempt: the attempt's
    /// time counts from now (recorded only where an attempt timeout
    /// counts it, so the common send reads no clock).
    pub(super) fn mark_called(&self) {
        if self.0.attempt_timeout.is_some() {
            *lock(&self.0.called) = Some(Instant::now());
        }
    }

    /// When a gate called the stack under it for the attempt in flight,
    /// if it did yet.
    pub(crate) fn called(&self) -> Option<Instant> {
        *lock(&self.0.called)
    }

    /// A gate took the attempt: time spent queued in it is not the attempt's.
    pub(super) fn mark_gated(&self) {
        self.0.gated.store(true, Ordering::Relaxed);
    }

    /// A gate took the link from the retry loop's offer.
    pub(super) fn mark_offered(&self) {
        self.0.offered.store(true, Ordering::Relaxed);
    }

    /// Whether a gate ever took the link from the retry loop's offer.
    pub(crate) fn offered(&self) -> bool {
        self.0.offered.load(Ordering::Relaxed)
    }

    /// Clears the marks before an attempt is called.
    pub(crate) fn reset_gated(&self) {
        if self.0.gated.swap(false, Ordering::Relaxed) && self.0.attempt_timeout.is_some() {
            *lock(&self.0.called) = None;
        }
    }

    /// Whether a gate took the attempt in flight (its time counts from the
    /// gate's call). A layer between may call the gate later than the retry
    /// layer called it, so this is asked when the attempt's own time is up.
    pub(crate) fn gated(&self) -> bool {
        self.0.gated.load(Ordering::Relaxed)
    }

    /// No send after this instant.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.0.deadline
    }

    /// The longest server-named wait the request honours.
    pub(crate) fn max_server_wait(&self) -> Duration {
        self.0.max_server_wait
    }

    /// The earliest the next send may go, for a wait its provider named it;
    /// taken by that send.
    pub(super) fn take_not_before(&self) -> Option<Instant> {
        lock(&self.0.not_before).take()
    }

    /// The gate let a send of `key` through at `at`.
    pub(super) fn sent(
        &self,
        gate: &Gate,
        key: u64,
        at: Instant,
        tokens: TokenMark,
        in_flight: InFlight,
    ) {
        *lock(&self.0.sent) = Some(Sent {
            gate: gate.clone(),
            key: Some(key),
            at,
            tokens,
            in_flight,
        });
    }

    /// The last attempt's send through a gate, if it went through one.
    pub(crate) fn take_sent(&self) -> Option<Sent> {
        lock(&self.0.sent).take()
    }
}

impl Sent {
    /// A send going through `gate` at `now` while it is quiet, noted by
    /// the retry loop right above it (the gate lets it pass untouched);
    /// `None` once the gate keys its sends.
    pub(crate) fn unkeyed(gate: &Gate, now: Instant) -> Option<Sent> {
        let quiet = gate.quiet()?;
        let order = quiet.send(now);
        let flight = Arc::clone(quiet.flight());
        Some(Sent {
            gate: gate.clone(),
            key: None,
            at: now,
            tokens: TokenMark {
                order,
                ..TokenMark::default()
            },
            in_flight: InFlight::start(flight, None),
        })
    }

    /// Whether the loop noted it itself, unkeyed (a quiet gate's).
    pub(crate) fn is_unkeyed(&self) -> bool {
        self.key.is_none()
    }

    /// Counts a quiet gate's send served, its answer stating nothing:
    /// nothing else to tell. The send back if it is keyed, or the gate no
    /// longer quiet (its answer is then news to key).
    pub(crate) fn served_quietly(self) -> Result<(), Sent> {
        match (self.key, self.gate.quiet()) {
            (None, Some(quiet)) => {
                quiet.served();
                Ok(())
            }
            _ => Err(self),
        }
    }

    /// What the gate made of the send, before its outcome is judged.
    pub(crate) fn as_judged(&self) -> GateSend {
        GateSend {
            paced: self.gate.paces.any() || self.gate.adaptive.is_some(),
            booked_tokens: self.tokens.cost,
            wait: GateWait::Own,
        }
    }

    /// Hands the key what the policy made of the send's outcome (for the
    /// request of `link`); a named wait holds the key, up to
    /// `max_server_wait`. What the gate now does about the resend: holds
    /// the key for all of a rate limit's named wait, or meters it by an
    /// overloaded key's in-flight ceiling, when that is above its floor and
    /// this is not the request's second overload in a row under it (a slot
    /// the ceiling grew by is the one an overload takes, and the same
    /// request must not take it each time).
    ///
    /// A quiet gate's send is keyed only now, by the request's `head`, and
    /// only for news: a success that states nothing is counted unkeyed
    /// while the gate stays quiet.
    pub(crate) fn report(
        self,
        link: &GateLink,
        news: KeyNews,
        now: Instant,
        max_server_wait: Duration,
        head: Head<'_>,
    ) -> GateWait {
        let Sent {
            gate,
            key,
            at,
            tokens: mark,
            mut in_flight,
        } = self;
        let key = match key {
            Some(key) => key,
            None if news == KeyNews::None => return GateWait::Own,
            None => {
                let stated_nothing = KeyNews::Served {
                    window: None,
                    tokens: None,
                };
                if let Some(quiet) = gate.quiet().filter(|_| news == stated_nothing) {
                    quiet.served();
                    return GateWait::Own;
                }
                let key = key_of(head, link.model().as_deref(), &gate.key_hasher);
                in_flight.read_into(gate.adopt(key, at, now));
                key
            }
        };
        let in_a_row = &link.0.slotted_overloads;
        if news != KeyNews::Overloaded {
            in_a_row.store(0, Ordering::Relaxed);
        }
        match news {
            KeyNews::None => GateWait::Own,
            KeyNews::Overloaded => {
                let meters = in_flight.overloaded(at, now);
                let again = in_flight.slotted() && in_a_row.fetch_add(1, Ordering::Relaxed) > 0;
                if meters && !again {
                    GateWait::SlotMetered
                } else {
                    GateWait::Own
                }
            }
            KeyNews::Served {
                window,
                tokens: stated,
            } => {
                in_flight.served();
                gate.served(key, (at, mark), now, window, stated, max_server_wait);
                GateWait::Own
            }
            KeyNews::Throttled {
                wait,
                rate,
                holds_key,
                whole_seconds,
                window,
                tokens: stated,
                final_answer,
            } => {
                // A stated quota first: it is the key's rate, and the rest
                // of the first wave's 429s are no decrease.
                let window = window.filter(|w| w.per_minute.is_some());
                if window.is_some() || stated.is_some() {
                    gate.stated(key, mark, now, (window, stated, max_server_wait));
                }
                // The hold before the rate: a whole-second wait is rounded
                // only on a key with a rate before this refusal's news
                // about the rate (one its headers just stated counts).
                let held = wait.filter(|_| holds_key).is_some_and(|wait| {
                    let held =
                        gate.hold(key, mark.order, now, wait, max_server_wait, whole_seconds);
                    // Its resend waits in the queue: no sooner than its own
                    // wait, whatever later answers say of the key's.
                    if held {
                        *lock(&link.0.not_before) = now.checked_add(wait.min(max_server_wait));
                    }
                    held
                });
                if rate {
                    gate.throttled(key, at, now, wait, final_answer);
                }
                if held {
                    GateWait::KeyHeld
                } else {
                    GateWait::Own
                }
            }
        }
    }
}

impl std::fmt::Debug for GateLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateLink")
            .field("deadline", &self.0.deadline)
            .field("max_server_wait", &self.0.max_server_wait)
            .finish_non_exhaustive()
    }
}

/// The error of an attempt cut before its response head: a timeout, which
/// the policy retries as one.
pub(crate) fn attempt_cut() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no response head within the attempt's time limit",
    )
}
