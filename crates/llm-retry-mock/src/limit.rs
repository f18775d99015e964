//! Provider-shaped rate limits for [`Route::limited`](crate::Route::limited):
//! what a quota admits and how a provider's answers state it.

use std::time::Duration;

/// How one quota counts: a bucket that refills continuously, or a window
/// that resets whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Quota {
    /// Refills `per_second` units a second up to `burst`, and starts full
    /// (Anthropic's and OpenAI's token buckets).
    Bucket {
        /// Units added per second.
        per_second: u64,
        /// The most the bucket holds (0 is taken as 1).
        burst: u64,
    },
    /// Admits `limit` units per fixed window of `length`, the windows
    /// aligned to the server's start (Azure OpenAI's per-minute windows).
    Window {
        /// Units each window admits.
        limit: u64,
        /// The window's length (zero is taken as one millisecond).
        length: Duration,
    },
}

/// How the provider's answers state their limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shape {
    /// A 429 names the exact wait: `retry-after-ms` (rounded up) and
    /// `retry-after` (whole seconds, rounded up); no headers on successes.
    Exact,
    /// Anthropic: `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`
    /// on every answer (limit per minute, reset as RFC 3339 in whole seconds,
    /// when the quota is full again); a 429 carries `retry-after` in whole
    /// seconds, rounded up.
    Anthropic,
    /// OpenAI: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` on
    /// every answer (limit per minute, reset as a Go duration until the
    /// quota is full again); a 429 carries `retry-after-ms` and
    /// `retry-after`.
    OpenAi,
    /// Azure OpenAI: `x-ratelimit-remaining-{requests,tokens}` on every
    /// answer, no reset; a 429 carries `retry-after` and `retry-after-ms`
    /// to the end of the window.
    Azure,
}

/// A provider's limits: a request quota, an optional token quota, an
/// optional ceiling on requests in flight, and the [`Shape`] its answers
/// take. See [`Route::limited`](crate::Route::limited).
///
/// ```
/// use std::time::Duration;
/// use llm_retry_mock::{Limit, Quota, Shape};
///
/// // 100 requests/s in bursts of 20 and 20 000 tokens/s, stated the
/// // way Anthropic states them; 529 past 50 requests in flight.
/// let limit = Limit::new(Quota::Bucket { per_second: 100, burst: 20 })
///     .tokens(Quota::Bucket { per_second: 20_000, burst: 40_000 })
///     .max_in_flight(50)
///     .shape(Shape::Anthropic);
/// # let _ = limit;
/// ```
#[derive(Debug, Clone)]
pub struct Limit {
    pub(crate) requests: Quota,
    pub(crate) tokens: Option<Quota>,
    pub(crate) max_in_flight: Option<u32>,
    pub(crate) shape: Shape,
    pub(crate) first_window_spent: bool,
}

impl Limit {
    /// A request quota, stated [`Shape::Exact`]ly, nothing else limited.
    pub fn new(requests: Quota) -> Limit {
        Limit {
            requests,
            tokens: None,
            max_in_flight: None,
            shape: Shape::Exact,
            first_window_spent: false,
        }
    }

    /// A token quota as well. A request costs [`Limit::token_cost`] of its
    /// body.
    pub fn tokens(mut self, tokens: Quota) -> Limit {
        self.tokens = Some(tokens);
        self
    }

    /// Past `n` requests in flight (their replies' delays not yet over),
    /// answer `529 overloaded_error` with no wait, whatever the quotas say.
    pub fn max_in_flight(mut self, n: u32) -> Limit {
        self.max_in_flight = Some(n);
        self
    }

    /// What a request body costs under a token quota: its `max_tokens` (or
    /// `max_output_tokens`, `max_completion_tokens`) plus a quarter of its
    /// bytes, rounded up, the way providers estimate before they run it.
    ///
    /// ```
    /// use llm_retry_mock::Limit;
    ///
    /// assert_eq!(Limit::token_cost(br#"{"max_tokens":100}"#), 100 + 5);
    /// ```
    pub fn token_cost(body: &[u8]) -> u64 {
        crate::limiter::token_cost(body)
    }

    /// How the answers state the limits.
    pub fn shape(mut self, shape: Shape) -> Limit {
        self.shape = shape;
        self
    }

    /// The quotas' first window (or a bucket's first fill) is used up when
    /// the server starts. A window refuses every request before its first
    /// reset, each told the same reset; a bucket starts empty, and tells
    /// each request when its next unit is there.
    pub fn first_window_spent(mut self) -> Limit {
        self.first_window_spent = true;
        self
    }
}
