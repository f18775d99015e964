//! [`GateError`]: why the gate refused a send.

use crate::classify::{Classification, FatalKind, Reported, RetryableKind};
use std::fmt;
use std::time::Duration;

/// Why the gate refused a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateError {
    /// The send's token cost exceeds what the quota can ever admit at once.
    NeverFits {
        /// The send's token cost.
        cost: u64,
        /// The most tokens the quota admits at once.
        capacity: u64,
    },
    /// The send's slot lies past the request's deadline.
    PastDeadline {
        /// How long the send would have waited.
        wait: Duration,
    },
    /// The key is held for a wait its provider named that is longer than
    /// the request honours.
    HeldTooLong {
        /// What is left of the wait the provider named.
        asked: Duration,
        /// The longest server-named wait the request honours.
        limit: Duration,
    },
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateError::NeverFits { cost, capacity } => write!(
                f,
                "a send costing {cost} tokens can never fit a quota admitting {capacity} at once"
            ),
            GateError::PastDeadline { wait } => write!(
                f,
                "the rate limit would hold this send {:.1} s, past the request's deadline",
                wait.as_secs_f64()
            ),
            GateError::HeldTooLong { asked, limit } => write!(
                f,
                "the key is held for a server-named wait of {}, more than the {} limit",
                crate::report::Secs(*asked),
                crate::report::Secs(*limit)
            ),
        }
    }
}

impl std::error::Error for GateError {}

impl GateError {
    /// A short, fixed name for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            GateError::NeverFits { .. } => "never_fits",
            GateError::PastDeadline { .. } => "past_deadline",
            GateError::HeldTooLong { .. } => "held_too_long",
        }
    }
}

/// A refused send never left: it is not counted as one. A key held too
/// long reads as the rate limit that put the hold there, so the request
/// stops with the same "server asked to wait …" as the request that met it.
impl Reported for GateError {
    fn classification(&self) -> Classification {
        match self {
            GateError::HeldTooLong { .. } => Classification::Retryable(RetryableKind::RateLimited),
            GateError::NeverFits { .. } | GateError::PastDeadline { .. } => {
                Classification::Fatal(FatalKind::LocalRateLimit)
            }
        }
    }

    fn named_wait(&self) -> Option<Duration> {
        match self {
            GateError::HeldTooLong { asked, .. } => Some(*asked),
            _ => None,
        }
    }

    fn reached_upstream(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_a_label_and_says_its_numbers() {
        let cases = [
            (
                GateError::NeverFits {
                    cost: 9_000,
                    capacity: 8_000,
                },
                "never_fits",
                "a send costing 9000 tokens can never fit a quota admitting 8000 at once",
            ),
            (
                GateError::PastDeadline {
                    wait: Duration::from_millis(2_500),
                },
                "past_deadline",
                "the rate limit would hold this send 2.5 s, past the request's deadline",
            ),
            (
                GateError::HeldTooLong {
                    asked: Duration::from_secs(300),
                    limit: Duration::from_secs(120),
                },
                "held_too_long",
                "the key is held for a server-named wait of 300 s, more than the 120 s limit",
            ),
        ];
        for (error, label, words) in cases {
            assert_eq!(error.label(), label);
            assert_eq!(error.to_string(), words);
        }
    }
}
