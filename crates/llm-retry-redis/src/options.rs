//! How a shared store talks to Redis and what it does when Redis does not
//! answer.

use std::time::Duration;

/// What a shared store decides while Redis does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FailureMode {
    /// Decide from this replica's own counts, as if it were alone (the
    /// default): no request fails because Redis is down.
    #[default]
    FailOpen,
    /// Refuse what needs the shared state: while Redis is down a retry
    /// budget grants no retry. First attempts are never refused.
    FailClosed,
}

/// Timeouts and sizes of a shared store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedOptions {
    /// Bound on each Redis call, connecting included; past it the call
    /// counts as failed (at least 1 ms).
    pub timeout: Duration,
    /// How often the store reports its counts to Redis and reads the
    /// fleet's back when nothing else asks it to (at least 1 ms).
    pub sync_interval: Duration,
    /// How long a reservation lasts from the sync that made it: Redis
    /// stops counting it then (a replica that died), and the replica stops
    /// spending it. Keep it longer than `sync_interval` plus twice
    /// `timeout`: a reserve that lapses refuses retries until the sync its
    /// refusal wakes, and while Redis hangs, until a call has timed out
    /// (the replica then decides alone), so a shorter one has a hung Redis
    /// cost retries the replica held.
    pub reservation_ttl: Duration,
    /// Retries a replica reserves ahead from the fleet's budget, so that
    /// granting one needs no round trip (at least 1). Larger: fewer round
    /// trips and fewer retries refused in a burst, more retries idle in
    /// reserve on one replica while another runs short.
    pub reserve: u32,
    /// What to decide while Redis does not answer.
    pub failure_mode: FailureMode,
    /// How many replicas share the state (at least 1). While Redis does
    /// not answer, a budget decides from its own window with the rule's
    /// floor (`min_per_sec`) divided by it, rounded down, so the fleet's
    /// floor stays within the rule's.
    pub replicas: u32,
}

impl Default for SharedOptions {
    /// 5 ms a call, a sync every 100 ms, reservations kept 1 s, eight
    /// retries in reserve, fail open, one replica.
    fn default() -> Self {
        SharedOptions {
            timeout: Duration::from_millis(5),
            sync_interval: Duration::from_millis(100),
            reservation_ttl: Duration::from_secs(1),
            reserve: 8,
            failure_mode: FailureMode::FailOpen,
            replicas: 1,
        }
    }
}

impl SharedOptions {
    /// The options in force: the floors above applied.
    pub(crate) fn effective(self) -> SharedOptions {
        let sync_interval = self.sync_interval.max(Duration::from_millis(1));
        SharedOptions {
            // A call needs some time: with none, Redis is never shared.
            timeout: self.timeout.max(Duration::from_millis(1)),
            sync_interval,
            reserve: self.reserve.max(1),
            replicas: self.replicas.max(1),
            ..self
        }
    }

    /// Bounds each Redis call by `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> SharedOptions {
        self.timeout = timeout;
        self
    }

    /// Syncs with Redis every `interval` at least.
    pub fn with_sync_interval(mut self, interval: Duration) -> SharedOptions {
        self.sync_interval = interval;
        self
    }

    /// Keeps a silent replica's reservation for `ttl`.
    pub fn with_reservation_ttl(mut self, ttl: Duration) -> SharedOptions {
        self.reservation_ttl = ttl;
        self
    }

    /// Reserves up to `reserve` retries ahead.
    pub fn with_reserve(mut self, reserve: u32) -> SharedOptions {
        self.reserve = reserve;
        self
    }

    /// Divides the floor of a budget's local decisions by `replicas` while
    /// Redis does not answer.
    pub fn with_replicas(mut self, replicas: u32) -> SharedOptions {
        self.replicas = replicas;
        self
    }

    /// Decides by `mode` while Redis does not answer.
    pub fn with_failure_mode(mut self, mode: FailureMode) -> SharedOptions {
        self.failure_mode = mode;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_keep_the_sync_task_from_spinning_and_a_reserve_possible() {
        let options = SharedOptions::default()
            .with_sync_interval(Duration::ZERO)
            .with_reserve(0)
            .with_replicas(0)
            .effective();
        assert_eq!(options.sync_interval, Duration::from_millis(1));
        assert_eq!(options.reserve, 1);
        assert_eq!(options.replicas, 1);
        let default = SharedOptions::default();
        assert_eq!(default.effective(), default);
    }
}
