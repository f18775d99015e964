//! Priority failover over an ordered list of upstreams, with bounded
//! further rounds when every one of them turned a request away.
//!
//! [`Failover`] is a tower service over ordered [`Target`]s, each typically
//! the library's retry stack ([`ClientLayer`](crate::ClientLayer)) over an
//! HTTP client for one provider, deployment or API key. A request goes to
//! the first target; it moves to the next only when the outcome proves the
//! request was not executed (a rejection, read
//! by the same judgement of the [`RetryPolicy`](crate::RetryPolicy) as every
//! retry): a 429, a 529 or an `overloaded_error` (as a status, or as a
//! stream's first event before any content), a connection never made, or
//! a send refused locally. It also moves on after an overload answered
//! with a status, so before any content — a 502, 503, 504 or 529, or a 500
//! whose body names `server_error` or `overloaded_error` — though such an
//! answer is no certified rejection and lets no further round begin.
//! Anything else — a success, another 5xx, a timeout after sending, a
//! reset after the request was written, a malformed answer, an auth or
//! configuration error, partial output — ends the request with that
//! outcome.
//!
//! ```no_run
//! use llm_retry::failover::{ExhaustionRetry, Failover, Target};
//! use std::time::Duration;
//!
//! # fn build<S>(primary: S, secondary: S) -> Result<(), llm_retry::ConfigError> {
//! let failover = Failover::builder(vec![
//!     Target::new("primary", primary).cooldown(),
//!     Target::new("secondary", secondary),
//! ])
//! .max_upstream_sends(6)
//! .exhaustion_retry(ExhaustionRetry::new(1, Duration::from_secs(2)))
//! .deadline(Duration::from_secs(120))
//! .build()?;
//! # let _ = failover;
//! # Ok(())
//! # }
//! ```
//!
//! # Bounds
//!
//! - One round tries each eligible target in order, at most
//!   `max_target_attempts` of them; the request-global `max_upstream_sends`
//!   is never exceeded (an attempt starts only while its target's
//!   [`max_sends`](Target::max_sends) are left).
//! - A request whose `state_bound` predicate holds (a provider-side
//!   conversation) only ever goes to the first target.
//! - A target with [`cooldown`](Target::cooldown) is skipped by every
//!   request for the same model until the wait its provider named has
//!   passed (providers limit each model apart; a wait named to a request
//!   naming no model, or one the target renamed, holds every model).
//! - A target with [`unhealthy_after`](Target::unhealthy_after) is skipped
//!   by every request for a window once it failed that often within it.
//! - With [`shared_marks`](Target::shared_marks), those two marks are also
//!   published to a [`SharedMarks`] store, and one published there by
//!   another process sets the target aside here too.
//! - A target with a [`first_content_timeout`](Target::first_content_timeout)
//!   is abandoned when nothing arrived in time, and the next one is tried.
//! - A target that is a retry stack waits and resends only within what the
//!   failover's deadline has left (each attempt's request carries it): a
//!   wait its provider named that would outlast it ends the target's
//!   attempt at once, and the request moves on.
//!
//! # Further rounds (opt-in)
//!
//! With [`ExhaustionRetry`], when every attempt of a round was a rate limit
//! or an overload certified as a rejection, one more round may begin —
//! again from the first target, skipping those still inside the wait
//! their provider named, with fresh requests built from the original —
//! after the soonest such wait (when none was named: 500 ms from the end
//! of the round, doubling each round) plus jitter.
//! It begins only if the request is not state-bound, no attempt of the
//! round was ambiguous, the shutdown has not started, sends are left, the
//! wait fits in `max_wait`, the deadline can hold the wait and one more
//! attempt as slow as the slowest so far, and fewer than
//! `max_waiting_rounds` requests of this failover are already waiting;
//! otherwise the report names why no round began. Dropping the request (the
//! client went away) or starting the [`Shutdown`] ends the wait. A
//! rejection's body is read (its first 64 KiB) before the request moves
//! on, so no connection is held while it waits.
//!
//! A target that retries on its own (a retry stack) is certified only
//! when every send it made was turned away ([`RetryReport::rejected_sends`](crate::RetryReport::rejected_sends)).
//!
//! When the last round is exhausted the last rejection is handed over with
//! `x-should-retry: false` and the wait left until a target takes requests
//! again as `retry-after` / `retry-after-ms`, so the caller's own SDK does
//! not multiply the failover's work. Every answer carries a
//! [`FailoverReport`] in its extensions.

mod body;
mod config;
mod error;
mod marks;
mod operation;
mod overload;
mod report;
mod service;
mod shutdown;
mod target;

pub use body::FailoverBody;
pub use config::{ExhaustionRetry, FailoverBuilder};
pub use error::FailoverError;
pub use marks::{Mark, MarkKind, SharedMarks};
#[cfg(test)]
use report::AttemptOutcome;
pub use report::{FailoverReport, FailoverStop};
pub use service::Failover;
pub use shutdown::Shutdown;
pub use target::{set_model, Target};

#[cfg(test)]
mod deadline_tests;
#[cfg(test)]
mod report_tests;
#[cfg(test)]
mod service_tests;
