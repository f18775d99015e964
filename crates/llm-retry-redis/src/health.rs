//! Whether a store is sharing through Redis or counting on its own, with
//! one `warn` per outage and the `llm_retry_shared_state_degraded` gauge.

use crate::key::StateName;
use std::sync::atomic::{AtomicU8, Ordering};

/// Not yet heard from Redis: local, quietly.
const STARTING: u8 = 0;
const SHARED: u8 = 1;
/// Redis failed: local until it answers again.
const DEGRADED: u8 = 2;

/// Why a Redis call counted as failed. Never carries the URL or a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    TimedOut,
    Redis(redis::ErrorKind),
}

#[derive(Debug)]
pub(crate) struct Health {
    mode: AtomicU8,
    /// What kind of state, for the log and the gauge: `budget`.
    store: &'static str,
    name: StateName,
}

impl Health {
    pub(crate) fn new(store: &'static str, name: StateName) -> Health {
        let health = Health {
            mode: AtomicU8::new(STARTING),
            store,
            name,
        };
        health.gauge(true);
        health
    }

    /// Whether decisions use the shared state now.
    pub(crate) fn is_shared(&self) -> bool {
        self.mode.load(Ordering::Acquire) == SHARED
    }

    pub(crate) fn succeeded(&self) {
        let before = self.mode.swap(SHARED, Ordering::AcqRel);
        if before == DEGRADED {
            tracing::info!(
                store = self.store,
                name = self.name.as_str(),
                "Redis answers again: shared state resumed"
            );
        }
        if before != SHARED {
            self.gauge(false);
        }
    }

    pub(crate) fn failed(&self, failure: Failure) {
        let before = self.mode.swap(DEGRADED, Ordering::AcqRel);
        if before != DEGRADED {
            tracing::warn!(
                store = self.store,
                name = self.name.as_str(),
                failure = ?failure,
                "Redis did not answer: deciding from local state until it does"
            );
        }
        if before == SHARED {
            self.gauge(true);
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn gauge(&self, degraded: bool) {
        #[cfg(feature = "metrics")]
        metrics::gauge!(
            "llm_retry_shared_state_degraded",
            "store" => self.store,
            "name" => self.name.as_str().to_owned()
        )
        .set(if degraded { 1.0 } else { 0.0 });
    }
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
