//! The context-overflow cut: `max(floor, limit − input − margin)`.

use crate::classify::ContextOverflow;

/// How the `max_tokens` cut after a context overflow is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverflowCut {
    /// Smallest `max_tokens` the cut produces (default 3000).
    pub floor: u64,
    /// Tokens kept free below the context limit (default 1000).
    pub margin: u64,
}

impl Default for OverflowCut {
    fn default() -> Self {
        OverflowCut {
            floor: 3000,
            margin: 1000,
        }
    }
}

/// Why no cut was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CutRefused {
    /// The provider's message did not give both the input size and the limit.
    CountsUnknown,
    /// The input alone fills the context window: no `max_tokens` can help.
    InputExceedsLimit {
        /// Tokens in the prompt.
        input_tokens: u64,
        /// The model's context window.
        context_limit: u64,
    },
}

/// The new `max_tokens` for a request that overflowed, or why none helps.
pub fn overflow_max_tokens(
    overflow: &ContextOverflow,
    cut: &OverflowCut,
) -> Result<u64, CutRefused> {
    let _ = (overflow, cut);
    Err(CutRefused::CountsUnknown)
}
