//! Per-request bounds: attempts, total elapsed time, longest honoured wait,
//! checked together.

use std::time::Duration;

/// Default number of retries after the first attempt.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 10;
/// Default bound on a logical request's total time, waits included.
///
/// Ten default retries sleep about 160–200 s in the worst case; five minutes
/// leaves room for the attempts themselves while still ending a request that
/// would otherwise keep a caller waiting indefinitely.
pub(crate) const DEFAULT_MAX_ELAPSED: Duration = Duration::from_secs(300);
/// Default longest server-named wait that is honoured; a longer demand
/// ends the request at once instead of freezing the caller.
pub(crate) const DEFAULT_MAX_SERVER_WAIT: Duration = Duration::from_secs(120);

/// The bounds every logical request stays inside (read through
/// [`RetryPolicy`](crate::RetryPolicy)'s accessors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Retries after the first attempt.
    pub(crate) max_retries: u32,
    /// Total time from the first send, waits included. A wait that would
    /// end past it is not started.
    pub(crate) max_elapsed: Duration,
    /// Longest server-named wait honoured.
    pub(crate) max_server_wait: Duration,
    /// Longest time one attempt may take to its response head (off by
    /// default: the deadline alone bounds it). An attempt cut by it, or by
    /// the deadline, counts as a timeout.
    pub(crate) attempt_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_retries: DEFAULT_MAX_RETRIES,
            max_elapsed: DEFAULT_MAX_ELAPSED,
            max_server_wait: DEFAULT_MAX_SERVER_WAIT,
            attempt_timeout: None,
        }
    }
}

/// Why [`Limits`] refuse another attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Retries {
        max_retries: u32,
    },
    ServerWait {
        asked: Duration,
        limit: Duration,
    },
    Deadline {
        elapsed: Duration,
        wait: Duration,
        limit: Duration,
    },
}

impl Limits {
    /// Checks retry number `retry` (1-based) against the attempt bound.
    pub(crate) fn admit_retry(&self, retry: u32) -> Result<(), Refusal> {
        if retry > self.max_retries {
            return Err(Refusal::Retries {
                max_retries: self.max_retries,
            });
        }
        Ok(())
    }

    /// Checks a server-named wait against the longest honoured wait.
    pub(crate) fn admit_server_wait(&self, asked: Duration) -> Result<(), Refusal> {
        if asked > self.max_server_wait {
            return Err(Refusal::ServerWait {
                asked,
                limit: self.max_server_wait,
            });
        }
        Ok(())
    }

    /// Checks that a wait of `wait`, starting `elapsed` into the request,
    /// ends inside the deadline.
    pub(crate) fn admit_wait(&self, elapsed: Duration, wait: Duration) -> Result<(), Refusal> {
        if elapsed.saturating_add(wait) > self.max_elapsed {
            return Err(Refusal::Deadline {
                elapsed,
                wait,
                limit: self.max_elapsed,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn each_bound_refuses_on_its_own() {
        let l = Limits {
            max_retries: 2,
            max_elapsed: S(10),
            max_server_wait: S(5),
            attempt_timeout: None,
        };
        assert_eq!(l.admit_retry(2), Ok(()));
        assert_eq!(l.admit_retry(3), Err(Refusal::Retries { max_retries: 2 }));
        assert_eq!(l.admit_server_wait(S(5)), Ok(()));
        assert_eq!(
            l.admit_server_wait(S(6)),
            Err(Refusal::ServerWait {
                asked: S(6),
                limit: S(5)
            })
        );
        assert_eq!(l.admit_wait(S(4), S(6)), Ok(()));
        assert_eq!(
            l.admit_wait(S(4), S(7)),
            Err(Refusal::Deadline {
                elapsed: S(4),
                wait: S(7),
                limit: S(10)
            })
        );
    }

    #[test]
    fn huge_waits_saturate_instead_of_overflowing() {
        let l = Limits::default();
        assert!(l.admit_wait(Duration::MAX, Duration::MAX).is_err());
        assert!(l.admit_server_wait(Duration::MAX).is_err());
    }
}
