//! [`GateError`]: why the gate refused a send.

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
        }
    }
}
