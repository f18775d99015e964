//! The request and token quotas an answer states, read in one pass over
//! its head.
//!
//! Every success through a gate is read for them, and providers send some
//! twenty headers with each answer, ten of which this reads: one pass that
//! sorts each header by its name's prefix costs a fraction of ten hashed
//! lookups. Each quantity is the first value of its header that parses, as
//! a lookup of that header would give.

use super::go_duration::parse_go_duration;
use super::headers::text;
use super::retry_after::until;
use super::rfc3339::parse_rfc3339;
use super::{RequestWindow, TokenWindow};
use http::{HeaderMap, HeaderValue};
use std::time::{Duration, SystemTime};

/// The prefixes of the quota headers OpenAI's and Anthropic's heads state.
const OPENAI: &str = "x-ratelimit-";
const ANTHROPIC: &str = "anthropic-ratelimit-";

/// What the head states, each the first valid value of its header.
#[derive(Default)]
struct Stated {
    openai_left: Option<u64>,
    openai_reset: Option<Duration>,
    openai_limit: Option<u64>,
    openai_tokens_left: Option<u64>,
    openai_tokens_limit: Option<u64>,
    anthropic_left: Option<u64>,
    anthropic_reset: Option<SystemTime>,
    anthropic_limit: Option<u64>,
    anthropic_tokens_left: Option<u64>,
    anthropic_tokens_limit: Option<u64>,
}

fn count(value: &HeaderValue) -> Option<u64> {
    text(value)?.parse::<u64>().ok()
}

/// Sets `slot` from `value` unless an earlier value already did.
fn first<T>(
    slot: &mut Option<T>,
    value: &HeaderValue,
    parse: impl FnOnce(&HeaderValue) -> Option<T>,
) {
    if slot.is_none() {
        *slot = parse(value);
    }
}

impl Stated {
    fn read(headers: &HeaderMap) -> Stated {
        let mut stated = Stated::default();
        for (name, value) in headers {
            let name = name.as_str();
            if let Some(rest) = name.strip_prefix(OPENAI) {
                match rest {
                    "remaining-requests" => first(&mut stated.openai_left, value, count),
                    "reset-requests" => first(&mut stated.openai_reset, value, |v| {
                        parse_go_duration(text(v)?)
                    }),
                    "limit-requests" => first(&mut stated.openai_limit, value, count),
                    "remaining-tokens" => first(&mut stated.openai_tokens_left, value, count),
                    "limit-tokens" => first(&mut stated.openai_tokens_limit, value, count),
                    _ => {}
                }
            } else if let Some(rest) = name.strip_prefix(ANTHROPIC) {
                match rest {
                    "requests-remaining" => first(&mut stated.anthropic_left, value, count),
                    "requests-reset" => first(&mut stated.anthropic_reset, value, |v| {
                        parse_rfc3339(text(v)?)
                    }),
                    "requests-limit" => first(&mut stated.anthropic_limit, value, count),
                    "tokens-remaining" => first(&mut stated.anthropic_tokens_left, value, count),
                    "tokens-limit" => first(&mut stated.anthropic_tokens_limit, value, count),
                    _ => {}
                }
            }
        }
        stated
    }
}

/// Whether a head may state quotas at all: it has a header of the
/// prefixes [`stated_quotas`] reads. Cheaper than reading them, for the
/// answers that say nothing.
pub(crate) fn may_state_quotas(headers: &HeaderMap) -> bool {
    // Through `AsRef<[u8]>`, not `as_str`: a second caller of `as_str`
    // keeps it from being inlined into `Stated::read`, which reads every
    // answer's head on the keyed path.
    headers.keys().any(|name| {
        let name: &[u8] = name.as_ref();
        name.starts_with(OPENAI.as_bytes()) || name.starts_with(ANTHROPIC.as_bytes())
    })
}

/// The request window and the token quota `headers` state (see
/// [`request_window`](super::request_window) and
/// [`token_window`](super::token_window)); `now` is read only when a reset
/// is named as an instant.
pub(crate) fn stated_quotas(
    headers: &HeaderMap,
    now: impl FnOnce() -> SystemTime,
) -> (Option<RequestWindow>, Option<TokenWindow>) {
    let stated = Stated::read(headers);
    // A quota of zero per minute states no rate.
    let positive = |n: Option<u64>| n.filter(|n| *n > 0);
    // A count without a (valid) reset still says how many more the window
    // admits; when it ends is unknown.
    let openai = stated.openai_left.map(|remaining| RequestWindow {
        remaining,
        reset_in: stated.openai_reset,
        per_minute: positive(stated.openai_limit),
    });
    let anthropic = stated.anthropic_left.map(|remaining| RequestWindow {
        remaining,
        reset_in: stated.anthropic_reset.map(|at| until(at, now())),
        per_minute: positive(stated.anthropic_limit),
    });
    let window = match (openai, anthropic) {
        (Some(a), Some(b)) => Some(if b.remaining < a.remaining { b } else { a }),
        (one, other) => one.or(other),
    };
    let token = |limit: Option<u64>, left: Option<u64>| {
        Some(TokenWindow {
            per_minute: positive(limit)?,
            remaining: left?,
        })
    };
    // The one with fewer tokens left; OpenAI's on a tie.
    let tokens = [
        token(stated.openai_tokens_limit, stated.openai_tokens_left),
        token(stated.anthropic_tokens_limit, stated.anthropic_tokens_left),
    ]
    .into_iter()
    .flatten()
    .min_by_key(|w| w.remaining);
    (window, tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::UNIX_EPOCH;

    /// The headers the pass reads, and two it must not confuse with them.
    const NAMES: [&str; 12] = [
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-limit-tokens",
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-reset",
        "anthropic-ratelimit-requests-limit",
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-tokens-limit",
        "anthropic-ratelimit-input-tokens-remaining",
        "x-ratelimit-reset-tokens",
    ];

    /// The same quantities read by looking each header up: the first of
    /// its values that parses.
    fn by_lookup(
        headers: &HeaderMap,
        now: SystemTime,
    ) -> (Option<RequestWindow>, Option<TokenWindow>) {
        let first = |name: &str| headers.get_all(name).iter().find_map(count);
        let positive = |n: Option<u64>| n.filter(|n| *n > 0);
        let openai = first(NAMES[0]).map(|remaining| RequestWindow {
            remaining,
            reset_in: headers
                .get_all(NAMES[1])
                .iter()
                .find_map(|v| parse_go_duration(text(v)?)),
            per_minute: positive(first(NAMES[2])),
        });
        let anthropic = first(NAMES[5]).map(|remaining| RequestWindow {
            remaining,
            reset_in: headers
                .get_all(NAMES[6])
                .iter()
                .find_map(|v| parse_rfc3339(text(v)?))
                .map(|at| until(at, now)),
            per_minute: positive(first(NAMES[7])),
        });
        let window = match (openai, anthropic) {
            (Some(a), Some(b)) => Some(if b.remaining < a.remaining { b } else { a }),
            (one, other) => one.or(other),
        };
        let token = |limit: &str, left: &str| {
            Some(TokenWindow {
                per_minute: positive(first(limit))?,
                remaining: first(left)?,
            })
        };
        let tokens = [token(NAMES[4], NAMES[3]), token(NAMES[9], NAMES[8])]
            .into_iter()
            .flatten()
            .min_by_key(|w| w.remaining);
        (window, tokens)
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            "[0-9]{1,4}",
            Just("0".to_owned()),
            "[0-9a-z.-]{0,6}",
            "[0-9]{1,3}(ms|s|m)",
            "2026-12-01T22:2[0-9]:[0-5][0-9]Z",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// In any order, with repeats and other headers between, one pass
        /// reads what a lookup of each header would.
        #[test]
        fn one_pass_reads_what_lookups_read(
            pairs in proptest::collection::vec((0..NAMES.len() + 2, value()), 0..16)
        ) {
            let now = UNIX_EPOCH + Duration::from_secs(1_796_163_600);
            let mut headers = HeaderMap::new();
            for (index, value) in &pairs {
                let name = NAMES.get(*index).copied().unwrap_or(if *index % 2 == 0 {
                    "content-type"
                } else {
                    "x-ratelimit-remaining"
                });
                headers.append(
                    http::HeaderName::from_static(name),
                    HeaderValue::from_str(value).expect("a valid value"),
                );
            }
            prop_assert_eq!(stated_quotas(&headers, || now), by_lookup(&headers, now));
        }
    }

    #[test]
    fn the_first_value_that_parses_counts() {
        let mut headers = HeaderMap::new();
        for value in ["five", "5", "6"] {
            headers.append(
                "x-ratelimit-remaining-requests",
                HeaderValue::from_static(value),
            );
        }
        let (window, _) = stated_quotas(&headers, || panic!("no reset names an instant"));
        assert_eq!(window.map(|w| w.remaining), Some(5));
    }
}
