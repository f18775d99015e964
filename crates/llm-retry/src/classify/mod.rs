//! What happened? Turns an attempt's outcome into a [`Classification`].
//!
//! Status is authoritative whenever a response arrived; the provider's error
//! body (`error.type`, `error.code`) refines it, and phrase markers are read
//! only when no status survived (a transport error carrying a message).
//! Everything here is pure: no I/O, no clock, no runtime.
//!
//! See the architecture document's decision table.

mod context;
mod phrase;
mod provider;
mod reported;
mod status;
mod transport;

pub use provider::{ContextOverflow, ProviderError};
pub use reported::Reported;
pub(crate) use reported::{find as find_reported, recognise, Recognise};
pub(crate) use status::{
    classify_response, classify_status, should_retry_header, with_should_retry,
};
pub(crate) use transport::classify_error;

use http::StatusCode;

/// The verdict on one attempt's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Classification {
    /// A final answer that is not a failure (2xx, and statuses that are not errors).
    Success,
    /// A transient failure: another attempt may succeed.
    Retryable(RetryableKind),
    /// A failure that another identical attempt would repeat.
    Fatal(FatalKind),
}

impl Classification {
    /// Whether the outcome may be retried.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Classification::Retryable(_))
    }
}

/// Why a failure is worth another attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryableKind {
    /// 429, or a `rate_limit_error` body.
    RateLimited,
    /// 529, or an `overloaded_error` body.
    Overloaded,
    /// A transient status: 408, 409, 500, 502, 503, 504 and other 5xx.
    Status(StatusCode),
    /// The server sent `x-should-retry: true` on a status that is otherwise fatal.
    ServerRequested(StatusCode),
    /// The connection could not be established.
    Connect,
    /// The connection was reset or closed before a complete response.
    Reset,
    /// No response headers arrived in time.
    Timeout,
    /// Another transport failure before any response.
    Transport,
}

/// Why a failure is final.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FatalKind {
    /// The server sent `x-should-retry: false`.
    ServerDeclined(StatusCode),
    /// Quota, spend-limit or billing failure (fatal even on 429).
    QuotaExhausted(StatusCode),
    /// A 400 saying the prompt plus `max_tokens` exceeds the context window.
    /// Recoverable by a smaller `max_tokens`; final until recovery is enabled.
    ContextOverflow(ContextOverflow),
    /// 401: credentials were rejected. Recoverable by a refresh hook.
    Unauthorized,
    /// The local rate-limit gate refused the send (past the deadline, or a
    /// cost that can never fit).
    LocalRateLimit,
    /// A streamed attempt failed after content reached the caller; it is
    /// never replayed.
    StreamCommitted,
    /// Any other status that another attempt would repeat (400, 403, 404,
    /// 413, 422, 501, 505, ...).
    Status(StatusCode),
}
