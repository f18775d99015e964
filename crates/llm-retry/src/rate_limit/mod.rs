//! Protect the upstream: pace every send to a key at the rate its provider
//! allows, in arrival order, and make a provider's "wait" a fact about the
//! key rather than about one request.
//!
//! First, do no harm: the gate makes a request wait longer than the retry
//! layer alone would only on evidence that its key (authority, credential
//! and the body's `model`) is out of capacity — a stated quota with no room
//! left, a named wait that later sends do not contradict, a learned rate
//! started by a burst of refusals whose cuts lower them, or a ceiling on
//! sends in flight set by a burst of overloads.
//!
//! Without a shared gate every request discovers a rate limit for itself:
//! each sends, gets a 429, waits, and sends again, so a crowd of clients
//! spends several sends per success. [`RateLimitLayer`] hands out send
//! slots per key (authority plus credential, or a [`RateKey`]) from
//! requests-per-minute and tokens-per-minute [`Quotas`], first in, first
//! out, and when a 429 names a wait it holds the whole key until then.
//! With a learned rate ([`RateLimitLayer::learned`], the default of
//! [`ClientLayer`](crate::ClientLayer)) the gate also finds the key's rate
//! itself from its 429s; waiting sends hold a place in a first-in,
//! first-out schedule that follows that rate as it changes.
//!
//! A send whose slot would fall past the request's deadline (set by
//! [`RetryLayer`](crate::RetryLayer)) or whose [`TokenCost`] can never fit
//! fails at once with a [`GateError`], which the retry policy treats as final.
//!
//! The gate reads no response itself. The retry layer above it judges each
//! attempt (the [`RetryPolicy`](crate::RetryPolicy)) and tells
//! the gate what the outcome meant for the key: a served
//! send, or a rate limit (a 429, or a stream whose first event is a
//! `rate_limit_error`) with the wait its provider named, which holds the
//! key for that long, up to the request's longest honoured wait. While a
//! key is held, a request that honours less than what is left of the named
//! wait fails at once with the same "server asked to wait …" as the
//! request that met it. A gate with no retry layer above it paces by its
//! quotas only.
//!
//! [`ClientLayer`](crate::ClientLayer) puts it in place; by hand, place it
//! under the retry layer, so every resend passes the gate too. A stack
//! built by hand in this order behaves exactly as `ClientLayer`:
//!
//! ```no_run
//! use llm_retry::rate_limit::{Quotas, RateLimitLayer};
//! use llm_retry::{RetryLayer, RetryPolicy};
//! use tower::ServiceBuilder;
//!
//! # fn wrap<C>(client: C) {
//! let quotas = Quotas::none().requests_per_minute(3_000).tokens_per_minute(400_000);
//! let gate = RateLimitLayer::new(quotas).expect("valid quotas");
//! let service = ServiceBuilder::new()
//!     .layer(RetryLayer::new(RetryPolicy::default()))
//!     .layer(gate)
//!     .service(client);
//! # let _ = service;
//! # }
//! ```
//!
//! The retry layer hands the gate its request's bounds and verdicts on the
//! thread while it calls the stack below and polls the attempt, so any
//! layer between them that calls its inner service in place or from its
//! own future works. A layer that calls it from another task (a `Buffer`)
//! works too: the retry service's first request shows it, and its
//! requests then carry the link in their extensions (three allocations
//! more per request).
//!
//! Under a [`ClientLayer`](crate::ClientLayer), until an answer says
//! anything about a key (a 429, an overload, a stated quota or window), a
//! gate told no quotas that shares with no store keys nothing: its retry
//! loop notes each send and the gate lets it pass; the first news keys its
//! request and every send after it.
//!
//! The gate's waits follow tokio's clock, so paused-clock tests drive them.
//! A send dropped while it waits gives up its slot without sending; the slot
//! is not handed back.

mod adaptive;
mod concurrency;
mod doubt;
mod error;
pub mod future;
mod gate;
mod gcra;
mod hold;
mod key;
mod keys;
mod layer;
pub(crate) mod link;
pub(crate) mod offer;
mod pacer;
mod quiet;
mod quota_book;
mod service;
mod shared;
mod window;

pub use error::GateError;
pub(crate) use gate::Gate;
pub(crate) use key::Head;
pub use key::{RateKey, TokenCost};
pub use layer::{Quotas, RateLimitLayer};
pub(crate) use link::KeyNews;
pub use service::RateLimit;
pub use shared::{SharedGate, SharedPace};

/// Every lock of the gate guards a few plain stores: a panic elsewhere
/// cannot leave its state torn, so a poisoned lock is taken as it is.
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod gateway_tests;
#[cfg(test)]
mod harm_tests;
#[cfg(test)]
mod internals_tests;
#[cfg(test)]
mod pacer_property_tests;
#[cfg(test)]
mod quiet_tests;
