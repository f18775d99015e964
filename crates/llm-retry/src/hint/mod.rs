//! Did the server name a wait? Parses `retry-after-ms`, `Retry-After`,
//! `x-should-retry`, rate-limit reset headers and body phrases into a
//! [`ServerHint`].
//!
//! Pure and saturating: no input, however malformed, panics.

use http::HeaderMap;
use std::time::{Duration, SystemTime};

/// What the server said about retrying.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerHint {
    /// `x-should-retry`, when present and valid.
    pub should_retry: Option<bool>,
    /// The wait the server named, if any.
    pub wait: Option<ServerWait>,
}

/// A wait named by the server, and where it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerWait {
    /// How long the server asked to wait (saturated, never negative).
    pub duration: Duration,
    /// Which signal named it.
    pub source: WaitSource,
}

/// The signal a [`ServerWait`] was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitSource {
    /// `retry-after-ms`.
    RetryAfterMs,
    /// `Retry-After` in seconds.
    RetryAfterSeconds,
    /// `Retry-After` as an HTTP-date.
    RetryAfterDate,
    /// `x-ratelimit-reset-requests` / `x-ratelimit-reset-tokens`.
    RateLimitReset,
    /// `anthropic-ratelimit-*-reset`.
    AnthropicRateLimitReset,
    /// A "try again in …" phrase in the body.
    BodyPhrase,
}

/// Reads every signal in `headers` (and `body`, when given) against `now`.
pub fn parse_hint(_headers: &HeaderMap, _body: Option<&[u8]>, _now: SystemTime) -> ServerHint {
    ServerHint::default()
}
