//! Rate-limit reset headers: OpenAI `x-ratelimit-reset-*` (Go durations) and
//! Anthropic `anthropic-ratelimit-*-reset` (RFC 3339 timestamps).
//!
//! Each response may describe several limits (requests, tokens, …). The wait
//! is the longest reset among the limits whose `*-remaining` header is
//! exactly zero; when no exhausted limit has a valid reset, the longest of
//! all valid resets.

use super::go_duration::parse_go_duration;
use super::headers::{first_valid, known_zero, text};
use super::retry_after::until;
use super::rfc3339::parse_rfc3339;
use super::{ServerWait, WaitSource};
use http::HeaderMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// OpenAI limits as `(reset header, remaining header)`.
const OPENAI: [(&str, &str); 2] = [
    (
        "x-ratelimit-reset-requests",
        "x-ratelimit-remaining-requests",
    ),
    ("x-ratelimit-reset-tokens", "x-ratelimit-remaining-tokens"),
];

/// Anthropic limits as `(reset header, remaining header)`.
const ANTHROPIC: [(&str, &str); 4] = [
    (
        "anthropic-ratelimit-requests-reset",
        "anthropic-ratelimit-requests-remaining",
    ),
    (
        "anthropic-ratelimit-tokens-reset",
        "anthropic-ratelimit-tokens-remaining",
    ),
    (
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-input-tokens-remaining",
    ),
    (
        "anthropic-ratelimit-output-tokens-reset",
        "anthropic-ratelimit-output-tokens-remaining",
    ),
];

/// The wait named by OpenAI's `x-ratelimit-reset-*` headers.
pub(crate) fn openai_reset(headers: &HeaderMap) -> Option<ServerWait> {
    let limits = OPENAI.iter().map(|(reset, remaining)| {
        let wait = first_valid(headers, *reset, |v| parse_go_duration(text(v)?));
        (wait, known_zero(headers, remaining))
    });
    let duration = pick(limits)?;
    Some(ServerWait {
        duration,
        source: WaitSource::RateLimitReset,
        whole_seconds: false,
    })
}

/// The wait named by Anthropic's `anthropic-ratelimit-*-reset` headers.
pub(crate) fn anthropic_reset(headers: &HeaderMap, now: SystemTime) -> Option<ServerWait> {
    // Rounded to whole seconds unless a reset states a fraction.
    let mut whole_seconds = true;
    let limits = ANTHROPIC.iter().map(|(reset, remaining)| {
        let at = first_valid(headers, *reset, |v| parse_rfc3339(text(v)?));
        if at.is_some_and(|at| {
            at.duration_since(UNIX_EPOCH)
                .is_ok_and(|d| d.subsec_nanos() != 0)
        }) {
            whole_seconds = false;
        }
        (at.map(|at| until(at, now)), known_zero(headers, remaining))
    });
    let duration = pick(limits)?;
    Some(ServerWait {
        duration,
        source: WaitSource::AnthropicRateLimitReset,
        whole_seconds,
    })
}

/// Whether the headers say a token quota is exhausted while the request
/// quota is not: the 429 is about what the requests carry, not how often
/// they come. (A token quota can also refuse a request with tokens left,
/// fewer than it needs; the gate, which knows the send's cost, tells that
/// case from the stated token count.)
pub(crate) fn token_quota_only(headers: &HeaderMap) -> bool {
    let tokens = [
        "x-ratelimit-remaining-tokens",
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-input-tokens-remaining",
        "anthropic-ratelimit-output-tokens-remaining",
    ];
    let requests = [
        "x-ratelimit-remaining-requests",
        "anthropic-ratelimit-requests-remaining",
    ];
    tokens.iter().any(|name| known_zero(headers, name))
        && !requests.iter().any(|name| known_zero(headers, name))
}

/// Longest reset among exhausted limits, else longest among all.
fn pick(limits: impl Iterator<Item = (Option<Duration>, bool)>) -> Option<Duration> {
    let (mut exhausted, mut any) = (None, None);
    for (wait, is_exhausted) in limits {
        any = any.max(wait);
        if is_exhausted {
            exhausted = exhausted.max(wait);
        }
    }
    exhausted.or(any)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::time::UNIX_EPOCH;

    /// Header name/value pairs of one case.
    type Headers<'a> = &'a [(&'static str, &'a str)];

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).expect("valid value"));
        }
        map
    }

    fn secs(n: u64) -> Option<Duration> {
        Some(Duration::from_secs(n))
    }

    const RQ: &str = "x-ratelimit-reset-requests";
    const TK: &str = "x-ratelimit-reset-tokens";
    const RQ_LEFT: &str = "x-ratelimit-remaining-requests";
    const TK_LEFT: &str = "x-ratelimit-remaining-tokens";

    #[test]
    fn openai_selection_table() {
        let cases: &[(Headers<'_>, Option<Duration>)] = &[
            (&[(RQ, "1s"), (TK, "6m0s")], secs(360)),
            (
                &[(RQ, "1s"), (TK, "6m0s"), (RQ_LEFT, "0"), (TK_LEFT, "900")],
                secs(1),
            ),
            (
                &[(RQ, "1s"), (TK, "6m0s"), (RQ_LEFT, "5"), (TK_LEFT, "0")],
                secs(360),
            ),
            (
                &[(RQ, "20s"), (TK, "6s"), (RQ_LEFT, "0"), (TK_LEFT, "0")],
                secs(20),
            ),
            (
                &[(RQ, "20s"), (TK, "6s"), (RQ_LEFT, "3"), (TK_LEFT, "4")],
                secs(20),
            ),
            (&[(TK, "6s"), (RQ_LEFT, "0")], secs(6)),
            (&[(RQ, "bogus"), (TK, "2s"), (RQ_LEFT, "0")], secs(2)),
            (&[(RQ, "12ms")], Some(Duration::from_millis(12))),
            (&[(RQ, "-1s"), (TK, "")], None),
            (&[(RQ_LEFT, "0")], None),
            (&[], None),
        ];
        for (pairs, want) in cases {
            let got = openai_reset(&headers(pairs)).map(|w| w.duration);
            assert_eq!(got, *want, "headers {pairs:?}");
        }
    }

    #[test]
    fn anthropic_selection_table() {
        let now = UNIX_EPOCH + Duration::from_secs(1_795_988_400); // 21:40:00Z
        let rq = "anthropic-ratelimit-requests-reset";
        let tk = "anthropic-ratelimit-tokens-reset";
        let inp = "anthropic-ratelimit-input-tokens-reset";
        let out = "anthropic-ratelimit-output-tokens-reset";
        let rq_left = "anthropic-ratelimit-requests-remaining";
        let out_left = "anthropic-ratelimit-output-tokens-remaining";
        let t10 = "2026-11-29T21:40:10Z";
        let t53 = "2026-11-29T21:40:53Z";
        let cases: &[(Headers<'_>, Option<Duration>)] = &[
            (&[(rq, t10)], secs(10)),
            (&[(rq, t10), (tk, t53)], secs(53)),
            (&[(rq, t10), (tk, t53), (rq_left, "0")], secs(10)),
            (
                &[(rq, t10), (out, t53), (rq_left, "0"), (out_left, "0")],
                secs(53),
            ),
            (
                &[(inp, "2026-11-29T21:40:00.5Z")],
                Some(Duration::from_millis(500)),
            ),
            (&[(inp, "2026-11-29T23:40:02+02:00")], secs(2)),
            (&[(rq, "2026-11-29T21:39:00Z")], secs(0)),
            (&[(rq, "not a date"), (tk, t10)], secs(10)),
            (&[(rq, "2026-02-30T00:00:00Z")], None),
            (&[(rq_left, "0")], None),
        ];
        for (pairs, want) in cases {
            let got = anthropic_reset(&headers(pairs), now).map(|w| w.duration);
            assert_eq!(got, *want, "headers {pairs:?}");
        }
    }

    #[test]
    fn sources_are_labelled() {
        let map = headers(&[
            (RQ, "1s"),
            ("anthropic-ratelimit-requests-reset", "2026-11-29T21:40:53Z"),
        ]);
        let openai = openai_reset(&map).map(|w| w.source);
        assert_eq!(openai, Some(WaitSource::RateLimitReset));
        let anthropic = anthropic_reset(&map, UNIX_EPOCH).map(|w| w.source);
        assert_eq!(anthropic, Some(WaitSource::AnthropicRateLimitReset));
    }
}

#[cfg(test)]
mod window_tests {
    use super::*;

    /// Header name/value pairs of one case.
    type Headers<'a> = &'a [(&'static str, &'a str)];
    use http::HeaderValue;
    use std::time::UNIX_EPOCH;

    /// What a window states: remaining, and the reset if known.
    type Stated = Option<(u64, Option<Duration>)>;

    fn window(pairs: &[(&'static str, &str)]) -> Stated {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).expect("valid"));
        }
        // 2026-11-29T21:40:00Z
        let now = UNIX_EPOCH + Duration::from_secs(1_795_988_400);
        super::super::request_window(&headers, now).map(|w| (w.remaining, w.reset_in))
    }

    #[test]
    fn request_windows_from_either_provider_the_tighter_wins() {
        let oai_left = "x-ratelimit-remaining-requests";
        let oai_reset = "x-ratelimit-reset-requests";
        let ant_left = "anthropic-ratelimit-requests-remaining";
        let ant_reset = "anthropic-ratelimit-requests-reset";
        let s = Duration::from_secs;
        let s = |n| Some(s(n));
        let cases: &[(Headers<'_>, Stated)] = &[
            (&[(oai_left, "59"), (oai_reset, "1s")], Some((59, s(1)))),
            (&[(oai_left, "0"), (oai_reset, "6m0s")], Some((0, s(360)))),
            (
                &[(ant_left, "12"), (ant_reset, "2026-11-29T21:40:30Z")],
                Some((12, s(30))),
            ),
            (
                &[
                    (oai_left, "50"),
                    (oai_reset, "1s"),
                    (ant_left, "3"),
                    (ant_reset, "2026-11-29T21:40:09Z"),
                ],
                Some((3, s(9))),
            ),
            // A count without a valid reset (Azure's) leaves the reset unknown.
            (&[(oai_left, "5")], Some((5, None))),
            (&[(oai_left, "5"), (oai_reset, "soon")], Some((5, None))),
            (&[(ant_left, "0")], Some((0, None))),
            // A malformed count names no window.
            (&[(oai_left, "-1"), (oai_reset, "1s")], None),
            (&[(oai_left, "five"), (oai_reset, "1s")], None),
            (&[], None),
        ];
        for (pairs, want) in cases {
            assert_eq!(window(pairs), *want, "{pairs:?}");
        }
    }

    #[test]
    fn a_window_carries_the_quota_per_minute_its_answer_states() {
        let per_minute = |pairs: &[(&'static str, &str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.append(*name, HeaderValue::from_str(value).expect("valid"));
            }
            let now = UNIX_EPOCH + Duration::from_secs(1_795_988_400);
            super::super::request_window(&headers, now).map(|w| w.per_minute)
        };
        let oai = [
            ("x-ratelimit-limit-requests", "5000"),
            ("x-ratelimit-remaining-requests", "4999"),
            ("x-ratelimit-reset-requests", "12ms"),
        ];
        assert_eq!(per_minute(&oai), Some(Some(5000)));
        let ant = [
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2026-11-29T21:40:02Z"),
        ];
        assert_eq!(per_minute(&ant), Some(Some(50)));
        // Missing, zero or malformed: the window stands, with no rate.
        for limit in ["0", "many", "-5"] {
            let with = [("x-ratelimit-limit-requests", limit), oai[1], oai[2]];
            assert_eq!(per_minute(&with), Some(None), "{limit}");
        }
        assert_eq!(per_minute(&oai[1..]), Some(None));
    }
}

#[cfg(test)]
mod token_window_tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn a_token_window_needs_its_quota_and_what_is_left() {
        let window = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, HeaderValue::from_static(value));
            }
            super::super::token_window(&headers).map(|w| (w.remaining, w.per_minute))
        };
        let oai = [
            ("x-ratelimit-limit-tokens", "600000"),
            ("x-ratelimit-remaining-tokens", "4200"),
        ];
        assert_eq!(window(&oai), Some((4200, 600_000)));
        let both = [
            oai[0],
            oai[1],
            ("anthropic-ratelimit-tokens-limit", "80000"),
            ("anthropic-ratelimit-tokens-remaining", "900"),
        ];
        assert_eq!(window(&both), Some((900, 80_000)), "fewer left wins");
        assert_eq!(window(&oai[1..]), None, "no quota");
        assert_eq!(window(&oai[..1]), None, "nothing left stated");
        let zero = [("x-ratelimit-limit-tokens", "0"), oai[1]];
        assert_eq!(window(&zero), None);
        let bad = [oai[0], ("x-ratelimit-remaining-tokens", "-3")];
        assert_eq!(window(&bad), None);
    }
}

#[cfg(test)]
mod token_quota_tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn only_an_exhausted_token_quota_beside_a_live_request_quota_counts() {
        let cases: &[(&[(&'static str, &'static str)], bool)] = &[
            (&[("x-ratelimit-remaining-tokens", "0")], true),
            (
                &[
                    ("x-ratelimit-remaining-tokens", "0"),
                    ("x-ratelimit-remaining-requests", "10"),
                ],
                true,
            ),
            (
                &[
                    ("x-ratelimit-remaining-tokens", "0"),
                    ("x-ratelimit-remaining-requests", "0"),
                ],
                false,
            ),
            (
                &[("anthropic-ratelimit-output-tokens-remaining", "0")],
                true,
            ),
            (&[("x-ratelimit-remaining-tokens", "12")], false),
            (&[("x-ratelimit-remaining-requests", "0")], false),
            (&[], false),
        ];
        for (pairs, want) in cases {
            let mut headers = HeaderMap::new();
            for (name, value) in *pairs {
                headers.insert(*name, HeaderValue::from_static(value));
            }
            assert_eq!(token_quota_only(&headers), *want, "{pairs:?}");
        }
    }
}
