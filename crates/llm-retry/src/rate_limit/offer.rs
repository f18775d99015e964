//! How the retry loop hands its request's [`GateLink`] to a gate under it
//! without a request extension.
//!
//! While the retry loop calls the service under it, the thread holds the
//! request's offer; a gate reached during that call takes the link from
//! it, making the link on first use. A request that meets no gate
//! allocates nothing, and its request carries no extension map: the
//! success path costs what a plain retry layer costs.
//!
//! Invariant: the offer lives only for the duration of one synchronous
//! `call` and is restored on every exit, unwinding included, so nested
//! retry layers each see their own and nothing leaks to a later call. A
//! gate therefore finds the link only when the layers between it and the
//! retry loop forward `call` at once (every layer of this crate does, as
//! do tower's `map_request`, `timeout` or `concurrency_limit`); a layer
//! that calls its inner service later, from another task (`Buffer`),
//! leaves the gate without it. Extensions still win: a request that
//! carries a [`GateLink`] (the `tower::retry` path) keeps it.

use super::link::GateLink;
use crate::budget::Limits;
use std::cell::Cell;
use std::time::Duration;
use tokio::time::Instant;

/// What a link is made with: the request's bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkBounds {
    pub(crate) deadline: Option<Instant>,
    pub(crate) max_server_wait: Duration,
    pub(crate) attempt_timeout: Option<Duration>,
}

impl LinkBounds {
    pub(crate) fn new(limits: &Limits, deadline: Option<Instant>) -> LinkBounds {
        LinkBounds {
            deadline,
            max_server_wait: limits.max_server_wait,
            attempt_timeout: limits.attempt_timeout,
        }
    }
}

struct Offer {
    bounds: LinkBounds,
    link: Option<GateLink>,
}

thread_local! {
    static OFFERED: Cell<Option<Offer>> = const { Cell::new(None) };
}

/// Puts the offer back as it was, and the link (made by a gate, or the one
/// offered) back where the retry loop keeps it.
struct Restore<'a> {
    outer: Option<Offer>,
    link: &'a mut Option<GateLink>,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let ours = OFFERED.with(|cell| cell.replace(self.outer.take()));
        if let Some(ours) = ours {
            *self.link = ours.link;
        }
    }
}

/// Runs `call` (the inner service's `call` for one attempt) with `link`
/// offered to the gate it reaches; afterwards `link` is the link a gate
/// made, if it made one.
pub(crate) fn offering<T>(
    link: &mut Option<GateLink>,
    bounds: LinkBounds,
    call: impl FnOnce() -> T,
) -> T {
    let offer = Offer {
        bounds,
        link: link.take(),
    };
    let outer = OFFERED.with(|cell| cell.replace(Some(offer)));
    let _restore = Restore { outer, link };
    call()
}

/// For a gate's `call`: the link of the request being called, if a retry
/// loop above offers one (made here the first time a gate asks).
pub(super) fn take() -> Option<GateLink> {
    OFFERED.with(|cell| {
        let mut offer = cell.take()?;
        let bounds = offer.bounds;
        let link = offer
            .link
            .get_or_insert_with(|| GateLink::new(bounds))
            .clone();
        cell.set(Some(offer));
        Some(link)
    })
}
