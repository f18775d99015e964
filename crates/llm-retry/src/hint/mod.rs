//! Did the server name a wait? Parses `retry-after-ms`, `Retry-After`,
//! `x-should-retry`, rate-limit reset headers and body phrases into a
//! [`ServerHint`].
//!
//! Pure and saturating: no input, however malformed, panics. The clock is
//! passed in as `now`, so every result is reproducible in tests.
//!
//! # Precedence
//!
//! [`parse_hint`] takes the wait from the first of these sources that holds a
//! valid value; a header that is present but invalid is ignored and the next
//! source is consulted:
//!
//! 1. `retry-after-ms`: milliseconds, fraction allowed (`1500`, `250.5`).
//! 2. `Retry-After`: seconds, fraction allowed (`1`, `0.5`), or an HTTP-date
//!    read as the time left from `now` (a past date is a zero wait).
//! 3. OpenAI `x-ratelimit-reset-requests` / `x-ratelimit-reset-tokens`: Go
//!    durations (`1s`, `6m0s`, `120ms`).
//! 4. Anthropic `anthropic-ratelimit-{requests,tokens,input-tokens,
//!    output-tokens}-reset`: RFC 3339 timestamps read as
//!    the time left from `now`.
//! 5. A "try again in …" phrase (`6ms`, `1.5s`, `20 seconds`) in the first
//!    64 KiB of the body, only when no header named a wait.
//!
//! For 3 and 4, the limits whose `*-remaining` header is exactly zero decide
//! (the longest of their resets); if none is known to be exhausted, or none of
//! the exhausted ones has a valid reset, the longest valid reset is used.
//!
//! `x-should-retry` (`true`/`false`, any case) is read independently of the
//! wait. For every header the first valid value wins when it is repeated.
//!
//! # Saturation
//!
//! Negative, NaN, infinite, exponent, signed, empty, non-ASCII and otherwise
//! malformed values are ignored. Well-formed but huge values saturate at
//! [`MAX_HINT`], so a caller can compare the wait with its own limit and
//! report how long the server asked for. Arithmetic is exact integer decimal
//! arithmetic; no float is ever converted unchecked.

// Crate-private: `pub` here marks what `crate::fuzzing` re-exports for the
// fuzz targets under `--cfg fuzzing`; no other build can reach it.
#![cfg_attr(not(fuzzing), allow(unreachable_pub))]

mod body;
mod go_duration;
mod headers;
mod number;
#[cfg(test)]
mod property_tests;
#[cfg(test)]
mod provider_shapes_tests;
mod ratelimit;
mod retry_after;
mod rfc3339;
mod stated;

#[cfg(any(test, fuzzing))]
pub use number::MAX_HINT;
pub use retry_after::parse_retry_after;

use http::{header::RETRY_AFTER, HeaderMap};
pub(crate) use stated::{may_state_quotas, stated_quotas};
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
    /// Whether it was named in whole seconds (`Retry-After: 2`, an
    /// HTTP-date, an RFC 3339 reset without a fraction): an upper bound,
    /// rounded up, not a precise instant.
    pub whole_seconds: bool,
}

/// A provider's request window as its rate-limit headers state it on an
/// answer: `remaining` more requests are admitted before the window resets
/// `reset_in` from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestWindow {
    /// Requests the window still admits.
    pub remaining: u64,
    /// Time until the window resets, when the answer states it. Anthropic
    /// and OpenAI both mean the time until the quota is full again: their
    /// quotas are buckets that refill continuously, so capacity returns
    /// sooner, a little at a time. Azure OpenAI states what is left only.
    pub reset_in: Option<Duration>,
    /// The request quota per minute, when the answer states it
    /// (`x-ratelimit-limit-requests`, `anthropic-ratelimit-requests-limit`):
    /// the key's sustained rate is this over 60 s.
    pub per_minute: Option<u64>,
}

/// A provider's token quota as its rate-limit headers state it on an
/// answer: `remaining` tokens now, refilling at `per_minute`
/// (`x-ratelimit-{limit,remaining}-tokens`,
/// `anthropic-ratelimit-tokens-{limit,remaining}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenWindow {
    /// Tokens the quota holds now.
    pub remaining: u64,
    /// The quota per minute: it refills at this over 60 s, up to this.
    pub per_minute: u64,
}

/// The token quota named by `headers`, the tighter when both providers'
/// headers are present. Malformed values, or a zero quota, name none.
#[cfg(any(test, fuzzing))]
pub fn token_window(headers: &HeaderMap) -> Option<TokenWindow> {
    // No reset is read for a token quota: the clock is never asked.
    stated::stated_quotas(headers, || std::time::UNIX_EPOCH).1
}

/// The request window named by `headers` (OpenAI's
/// `x-ratelimit-{remaining,reset}-requests`, Anthropic's
/// `anthropic-ratelimit-requests-{remaining,reset}`), the tighter when both
/// are present. A malformed count names no window; a count without a valid
/// reset (Azure OpenAI's) names one whose reset is unknown.
pub fn request_window(headers: &HeaderMap, now: SystemTime) -> Option<RequestWindow> {
    stated::stated_quotas(headers, || now).0
}

/// Whether `headers` say a token quota is exhausted while the request
/// quota is not (OpenAI's `x-ratelimit-remaining-tokens`, Anthropic's
/// `anthropic-ratelimit-*tokens-remaining` at zero, the request counts not):
/// a 429 about what requests carry, not how often they come.
pub fn token_quota_only(headers: &HeaderMap) -> bool {
    ratelimit::token_quota_only(headers)
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
    /// What is left of a wait named earlier for the whole key, which a
    /// rate-limit gate holds it for.
    KeyHold,
}

/// Reads every signal in `headers` (and `body`, when given) against `now`.
///
/// The wait comes from the first valid source in this order (see the
/// [module docs](self) for formats): `retry-after-ms` > `Retry-After` >
/// `x-ratelimit-reset-*` > `anthropic-ratelimit-*-reset` > a "try again in …"
/// phrase in `body`. Present but invalid headers are skipped, and so is a
/// zero wait when a later source names a positive one: `retry-after: 0`
/// beside an exhausted limit's 2 s reset means 2 s. The body is only scanned
/// (its first 64 KiB) when no header named a positive wait. Never panics;
/// any wait is at most [`MAX_HINT`].
#[cfg(any(test, fuzzing))]
pub fn parse_hint(headers: &HeaderMap, body: Option<&[u8]>, now: SystemTime) -> ServerHint {
    ServerHint {
        should_retry: crate::classify::should_retry_header(headers),
        wait: named_wait(headers, body, now, Signals::All),
    }
}

/// Which signals may name the wait for a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signals {
    /// `retry-after-ms` and `Retry-After` only: they answer the failure
    /// itself. Reset headers and phrases describe quotas, which every
    /// response carries, and count only for a rate limit.
    RetryAfter,
    /// Every signal, for a rate limit.
    All,
}

/// The first positive wait among the sources `signals` allows, by
/// precedence; when none is positive, the first zero one.
pub(crate) fn named_wait(
    headers: &HeaderMap,
    body: Option<&[u8]>,
    now: SystemTime,
    signals: Signals,
) -> Option<ServerWait> {
    let mut zero = None;
    let mut sources = header_waits(headers, now, signals)
        .chain(std::iter::once_with(|| match signals {
            Signals::All => body_wait(body?),
            Signals::RetryAfter => None,
        }))
        .flatten();
    let positive = sources.find(|wait| {
        let positive = wait.duration >= MIN_WAIT;
        if !positive && zero.is_none() {
            zero = Some(*wait);
        }
        positive
    });
    positive.or(zero)
}

/// Shorter than the timer's tick: no wait at all.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// The waits named by headers, by precedence.
fn header_waits(
    headers: &HeaderMap,
    now: SystemTime,
    signals: Signals,
) -> impl Iterator<Item = Option<ServerWait>> {
    let quota = signals == Signals::All;
    [
        headers::first_valid(headers, "retry-after-ms", retry_after::parse_retry_after_ms),
        headers::first_valid(headers, RETRY_AFTER.as_str(), |v| parse_retry_after(v, now)),
        quota.then(|| ratelimit::openai_reset(headers)).flatten(),
        quota
            .then(|| ratelimit::anthropic_reset(headers, now))
            .flatten(),
    ]
    .into_iter()
}

/// The wait named by a phrase in the body.
fn body_wait(body: &[u8]) -> Option<ServerWait> {
    Some(ServerWait {
        duration: body::parse_body_phrase(body)?,
        source: WaitSource::BodyPhrase,
        whole_seconds: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::time::UNIX_EPOCH;

    /// 2026-11-29T21:40:00Z.
    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_795_988_400)
    }

    /// Header name/value pairs of one case.
    type Headers<'a> = &'a [(&'static str, &'a [u8])];
    /// Headers, body, expected wait.
    type Case<'a> = (Headers<'a>, Option<&'a [u8]>, Option<ServerWait>);

    fn hint(pairs: &[(&'static str, &[u8])], body: Option<&[u8]>) -> ServerHint {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_bytes(value).expect("valid bytes"));
        }
        parse_hint(&headers, body, now())
    }

    fn wait(ms: u64, source: WaitSource) -> Option<ServerWait> {
        let duration = Duration::from_millis(ms);
        // Every whole-second case in these tables names whole seconds.
        let whole_seconds = matches!(
            source,
            WaitSource::RetryAfterSeconds
                | WaitSource::RetryAfterDate
                | WaitSource::AnthropicRateLimitReset
        ) && ms % 1000 == 0;
        Some(ServerWait {
            duration,
            source,
            whole_seconds,
        })
    }

    const MS: &str = "retry-after-ms";
    const RA: &str = "retry-after";
    const OAI: &str = "x-ratelimit-reset-requests";
    const ANT: &str = "anthropic-ratelimit-requests-reset";
    const T53: &[u8] = b"2026-11-29T21:40:53Z";
    const BODY: Option<&[u8]> = Some(b"Please try again in 6ms.");

    #[test]
    fn precedence_table() {
        use WaitSource::*;
        let cases: &[Case<'_>] = &[
            (
                &[(MS, b"1500"), (RA, b"9"), (OAI, b"7s"), (ANT, T53)],
                BODY,
                wait(1500, RetryAfterMs),
            ),
            (
                &[(RA, b"9"), (OAI, b"7s"), (ANT, T53)],
                BODY,
                wait(9000, RetryAfterSeconds),
            ),
            (
                &[(RA, b"Sun, 29 Nov 2026 21:40:09 GMT")],
                None,
                wait(9000, RetryAfterDate),
            ),
            (
                &[(OAI, b"7s"), (ANT, T53)],
                BODY,
                wait(7000, RateLimitReset),
            ),
            (&[(ANT, T53)], BODY, wait(53_000, AnthropicRateLimitReset)),
            (&[], BODY, wait(6, BodyPhrase)),
            (
                &[(MS, b"-1"), (RA, b"2")],
                None,
                wait(2000, RetryAfterSeconds),
            ),
            (
                &[
                    (MS, b"NaN"),
                    (RA, b"soon"),
                    (OAI, b"1x"),
                    (ANT, b"2026-02-30T00:00:00Z"),
                ],
                BODY,
                wait(6, BodyPhrase),
            ),
            (&[(MS, b"\xff\x31"), (RA, b"   ")], None, None),
            (&[(RA, b"0")], None, wait(0, RetryAfterSeconds)),
            // a zero names no wait when a later source names one
            (&[(RA, b"0")], BODY, wait(6, BodyPhrase)),
            (
                &[(MS, b"0"), (RA, b"3")],
                None,
                wait(3000, RetryAfterSeconds),
            ),
            (
                &[(RA, b"0"), (OAI, b"2s")],
                None,
                wait(2000, RateLimitReset),
            ),
            (&[(MS, b"0"), (RA, b"0")], None, wait(0, RetryAfterMs)),
            (
                &[(RA, b"bad"), (RA, b"3")],
                None,
                wait(3000, RetryAfterSeconds),
            ),
            (
                &[(RA, b"4"), (RA, b"3")],
                None,
                wait(4000, RetryAfterSeconds),
            ),
            (&[], Some(b"no phrase here"), None),
            (&[], None, None),
        ];
        for (pairs, body, want) in cases {
            assert_eq!(hint(pairs, *body).wait, *want, "headers {pairs:?}");
        }
    }

    #[test]
    fn huge_values_saturate() {
        let huge: &[u8] = b"99999999999999999999999999999999999";
        for name in [MS, RA, OAI] {
            let got = hint(&[(name, huge)], None).wait.map(|w| w.duration);
            assert_eq!(got, Some(MAX_HINT), "header {name}");
        }
    }

    #[test]
    fn should_retry_is_independent_of_wait() {
        let got = hint(&[("x-should-retry", b"false"), (RA, b"1")], None);
        assert_eq!(got.should_retry, Some(false));
        assert_eq!(got.wait, wait(1000, WaitSource::RetryAfterSeconds));
        assert_eq!(hint(&[], None), ServerHint::default());
    }
}

#[cfg(test)]
mod doc_examples {
    //! The examples this module's documentation carried while it was public.
    #![allow(clippy::unwrap_used)]

    #[test]
    fn example_1() {
        use crate::hint::{parse_hint, WaitSource};
        use http::{HeaderMap, HeaderValue};
        use std::time::{Duration, SystemTime};

        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("2.5"));
        headers.insert("x-should-retry", HeaderValue::from_static("true"));
        let hint = parse_hint(&headers, None, SystemTime::now());
        assert_eq!(hint.should_retry, Some(true));
        let wait = hint.wait.expect("a wait");
        assert_eq!(wait.duration, Duration::from_millis(2500));
        assert_eq!(wait.source, WaitSource::RetryAfterSeconds);
    }
}
