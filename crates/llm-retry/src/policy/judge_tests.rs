#![allow(clippy::unwrap_used)]

use super::*;
use crate::backoff::Jitter;
use crate::classify::{FatalKind, RetryableKind};
use http::HeaderValue;

fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .jitter(Jitter::None)
        .seed(1)
        .build()
        .unwrap()
}

/// A request after `attempts` sends, each resend after a computed wait.
fn after(attempts: u32) -> RetryState {
    let mut state = RetryState::new();
    for n in 0..attempts {
        if n > 0 {
            state.record_wait(Duration::from_millis(1), false);
        }
        state.record_send();
    }
    state
}

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_static(v));
    }
    h
}

fn judge(p: &RetryPolicy, attempts: u32, status: u16, h: &HeaderMap, body: &[u8]) -> Judgement {
    let status = StatusCode::from_u16(status).unwrap();
    let outcome = Outcome::Response {
        status,
        headers: h,
        body: Some(body),
    };
    p.judge(&after(attempts), outcome, Duration::ZERO)
}

#[test]
fn computed_delays_follow_the_backoff_without_a_hint() {
    let p = policy();
    let delays: Vec<_> = (1..=8)
        .map(
            |n| match judge(&p, n, 503, &HeaderMap::new(), b"").decision {
                Decision::Retry {
                    delay,
                    server_wait: None,
                    ..
                } => delay.as_millis(),
                other => panic!("{other:?}"),
            },
        )
        .collect();
    assert_eq!(delays, [500, 1000, 2000, 4000, 8000, 16000, 32000, 32000]);
}

#[test]
fn a_retry_after_second_is_a_floor_with_small_spread() {
    let p = RetryPolicy::default();
    let h = headers(&[("retry-after", "1")]);
    for _ in 0..100 {
        match judge(&p, 1, 429, &h, b"").decision {
            Decision::Retry {
                delay,
                server_wait: Some(w),
                ..
            } => {
                assert_eq!(w.duration, Duration::from_secs(1));
                assert!(delay >= Duration::from_secs(1) && delay <= Duration::from_millis(1100));
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_wait_above_the_limit_stops_at_once_naming_both_numbers() {
    let h = headers(&[("retry-after", "200")]);
    let j = judge(&policy(), 1, 429, &h, b"");
    let Decision::Stop(stop) = j.decision else {
        panic!("{:?}", j.decision)
    };
    assert_eq!(
        stop,
        StopReason::ServerWaitTooLong {
            asked: Duration::from_secs(200),
            limit: Duration::from_secs(120)
        }
    );
    assert_eq!(
        stop.to_string(),
        "server asked to wait 200 s, more than the 120 s limit"
    );
}

#[test]
fn fatal_and_declined_outcomes_stop() {
    let p = policy();
    let j = judge(&p, 1, 400, &HeaderMap::new(), b"");
    assert_eq!(
        j.decision,
        Decision::Stop(StopReason::NotRetryable(FatalKind::Status(
            StatusCode::BAD_REQUEST
        )))
    );
    let declined = headers(&[("x-should-retry", "false")]);
    let j = judge(&p, 1, 503, &declined, b"");
    assert_eq!(
        j.decision,
        Decision::Stop(StopReason::NotRetryable(FatalKind::ServerDeclined(
            StatusCode::SERVICE_UNAVAILABLE
        )))
    );
}

#[test]
fn success_is_accepted_even_with_an_error_envelope() {
    let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let j = judge(&policy(), 1, 200, &HeaderMap::new(), body);
    assert_eq!(j.decision, Decision::Accept);
}

#[test]
fn the_retry_cap_counts_retries_after_the_first_attempt() {
    let p = RetryPolicy::builder()
        .max_retries(2)
        .jitter(Jitter::None)
        .build()
        .unwrap();
    assert!(matches!(
        judge(&p, 2, 500, &HeaderMap::new(), b"").decision,
        Decision::Retry { .. }
    ));
    assert_eq!(
        judge(&p, 3, 500, &HeaderMap::new(), b"").decision,
        Decision::Stop(StopReason::RetriesExhausted { max_retries: 2 })
    );
}

#[test]
fn a_wait_that_would_cross_the_deadline_is_not_started() {
    let p = RetryPolicy::builder()
        .max_elapsed(Duration::from_secs(10))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let h = HeaderMap::new();
    let outcome = Outcome::Response {
        status: StatusCode::BAD_GATEWAY,
        headers: &h,
        body: None,
    };
    let j = p.judge(&after(1), outcome, Duration::from_millis(9_600));
    assert_eq!(
        j.decision,
        Decision::Stop(StopReason::DeadlineReached {
            elapsed: Duration::from_millis(9_600),
            wait: Duration::from_millis(500),
            limit: Duration::from_secs(10),
        })
    );
    let j = p.judge(&after(1), outcome, Duration::from_millis(9_500));
    assert!(matches!(j.decision, Decision::Retry { .. }));
}

#[test]
fn overload_bodies_are_read_for_the_report() {
    let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let j = judge(&policy(), 1, 529, &HeaderMap::new(), body);
    assert_eq!(
        j.class,
        Classification::Retryable(RetryableKind::Overloaded)
    );
    assert_eq!(
        j.provider.unwrap().kind.as_deref(),
        Some("overloaded_error")
    );
}

#[test]
fn transport_errors_are_retried_with_backoff() {
    let err = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    let j = policy().judge(&after(1), Outcome::Error(&err), Duration::ZERO);
    assert_eq!(j.class, Classification::Retryable(RetryableKind::Reset));
    assert_eq!(
        j.decision,
        Decision::Retry {
            delay: Duration::from_millis(500),
            server_wait: None,
            scope: WaitScope::Request,
            charged: true,
            in_gate: false,
        }
    );
}

#[test]
fn quota_reset_headers_name_a_wait_only_for_rate_limits() {
    let p = policy();
    let quota = headers(&[
        ("x-ratelimit-reset-tokens", "6m0s"),
        ("x-ratelimit-remaining-tokens", "0"),
    ]);
    // A 500 carrying the usual quota headers backs off as a 500.
    let j = judge(&p, 1, 500, &quota, b"");
    assert_eq!(
        j.decision,
        Decision::Retry {
            delay: Duration::from_millis(500),
            server_wait: None,
            scope: WaitScope::Request,
            charged: true,
            in_gate: false,
        }
    );
    // On a 429 the exhausted quota's reset is the wait (here past the limit).
    let j = judge(&p, 1, 429, &quota, b"");
    assert!(
        matches!(
            j.decision,
            Decision::Stop(StopReason::ServerWaitTooLong { .. })
        ),
        "{:?}",
        j.decision
    );
}

#[test]
fn a_zero_named_wait_falls_back_to_computed_backoff() {
    let p = policy();
    for zero in [("retry-after", "0"), ("retry-after-ms", "0")] {
        let j = judge(&p, 1, 429, &headers(&[zero]), b"");
        assert_eq!(
            j.decision,
            Decision::Retry {
                delay: Duration::from_millis(500),
                server_wait: None,
                scope: WaitScope::Request,
                charged: true,
                in_gate: false,
            },
            "{zero:?}"
        );
    }
}

#[test]
fn server_named_waits_do_not_raise_the_backoff_exponent() {
    // Five 429s that each named a wait, then a silent 503: the 503's
    // backoff is the first step, not the sixth (after an outage or a rate
    // limit, a request must not sleep long past the server's recovery).
    let p = policy();
    let mut state = RetryState::new();
    state.record_send();
    for _ in 0..5 {
        state.record_wait(Duration::from_secs(1), true);
        state.record_send();
    }
    let outcome = Outcome::Response {
        status: StatusCode::SERVICE_UNAVAILABLE,
        headers: &HeaderMap::new(),
        body: Some(b""),
    };
    match p.judge(&state, outcome, Duration::ZERO).decision {
        Decision::Retry {
            delay,
            server_wait: None,
            ..
        } => assert_eq!(delay, Duration::from_millis(500)),
        other => panic!("{other:?}"),
    }
    // The retry cap still counts every send.
    let capped = RetryPolicy::builder().max_retries(5).build().unwrap();
    let outcome = Outcome::Response {
        status: StatusCode::SERVICE_UNAVAILABLE,
        headers: &HeaderMap::new(),
        body: Some(b""),
    };
    assert!(matches!(
        capped.judge(&state, outcome, Duration::ZERO).decision,
        Decision::Stop(StopReason::RetriesExhausted { max_retries: 5 })
    ));
}

#[test]
fn a_zero_retry_after_does_not_hide_an_exhausted_limits_reset() {
    // retry-after: 0 beside an exhausted request limit resetting in 2 s:
    // the wait is the reset's, not a computed 500 ms.
    let p = policy();
    let h = headers(&[
        ("retry-after", "0"),
        ("x-ratelimit-reset-requests", "2s"),
        ("x-ratelimit-remaining-requests", "0"),
    ]);
    match judge(&p, 1, 429, &h, b"").decision {
        Decision::Retry {
            server_wait: Some(w),
            scope,
            ..
        } => {
            assert_eq!(w.duration, Duration::from_secs(2));
            assert_eq!(
                scope,
                WaitScope::Key,
                "a rate limit's named wait is the key's"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn behind_a_gateway_only_backpressure_is_left_to_it() {
    let p = RetryPolicy::builder().behind_gateway(true).build().unwrap();
    for code in [429, 529, 500, 502, 503, 504] {
        assert_eq!(
            judge(&p, 1, code, &HeaderMap::new(), b"").decision,
            Decision::Stop(StopReason::LeftToGateway),
            "{code}"
        );
    }
    // 408 and 409 say nothing about the gateway's backpressure: retried.
    for code in [408, 409] {
        let decision = judge(&p, 1, code, &HeaderMap::new(), b"").decision;
        assert!(
            matches!(decision, Decision::Retry { .. }),
            "{code}: {decision:?}"
        );
    }
}

#[test]
fn a_send_the_gate_refused_for_a_long_hold_fails_fast_even_with_no_retries_left() {
    // The refused send never left: with no retry allowed it still stops
    // for the wait, not for spent retries.
    let p = RetryPolicy::builder().max_retries(0).build().unwrap();
    let refused = crate::rate_limit::GateError::HeldTooLong {
        asked: Duration::from_secs(500),
        limit: Duration::from_secs(120),
    };
    let j = p.judge(&after(1), Outcome::Error(&refused), Duration::ZERO);
    assert!(!j.reached_upstream);
    assert_eq!(j.key, crate::rate_limit::KeyNews::None);
    assert!(
        matches!(
            j.decision,
            Decision::Stop(StopReason::ServerWaitTooLong { .. })
        ),
        "{:?}",
        j.decision
    );
}

#[test]
fn a_429_that_may_not_be_retried_still_tells_the_key_its_wait() {
    let h = headers(&[("x-should-retry", "false"), ("retry-after", "30")]);
    let j = judge(&policy(), 1, 429, &h, b"");
    assert!(matches!(
        j.decision,
        Decision::Stop(StopReason::NotRetryable(_))
    ));
    assert_eq!(
        j.key,
        crate::rate_limit::KeyNews::Throttled {
            wait: Some(Duration::from_secs(30)),
            rate: true,
            holds_key: true,
            whole_seconds: true,
            window: None,
            tokens: None,
            final_answer: true,
        }
    );
}

#[test]
fn only_a_wait_named_in_whole_seconds_tells_the_key_it_was_rounded() {
    // A fraction is precise: `Retry-After: 1.5` or an RFC 3339 reset with
    // milliseconds must hold the key for all of it, not 1 s less.
    let soon = std::time::SystemTime::now() + Duration::from_secs(30);
    let date = httpdate::fmt_http_date(soon);
    let reset = humantime::format_rfc3339_seconds(soon).to_string();
    let reset_ms = humantime::format_rfc3339_millis(soon).to_string();
    let reset_key = "anthropic-ratelimit-requests-reset";
    let cases = [
        (("retry-after", "2"), true),
        (("retry-after", "1.5"), false),
        (("retry-after", date.as_str()), true),
        (("retry-after-ms", "2000"), false),
        ((reset_key, reset.as_str()), true),
        ((reset_key, reset_ms.as_str()), false),
    ];
    for ((name, value), whole) in cases {
        let mut h = HeaderMap::new();
        h.insert(name, value.parse().unwrap());
        let j = judge(&policy(), 1, 429, &h, b"");
        let crate::rate_limit::KeyNews::Throttled { whole_seconds, .. } = j.key else {
            panic!("{name}: {:?}", j.key);
        };
        assert_eq!(whole_seconds, whole, "{name}: {value}");
    }
}

#[test]
fn a_fresh_state_judges_the_first_send_against_the_retry_cap() {
    // A caller outside the layers passes RetryState::new(): the attempt it
    // judges is the first send, so no retry is left under max_retries(0).
    let p = RetryPolicy::builder().max_retries(0).build().unwrap();
    let outcome = Outcome::Response {
        status: StatusCode::SERVICE_UNAVAILABLE,
        headers: &HeaderMap::new(),
        body: None,
    };
    assert_eq!(
        p.judge(&RetryState::new(), outcome, Duration::ZERO)
            .decision,
        Decision::Stop(StopReason::RetriesExhausted { max_retries: 0 })
    );
}

#[test]
fn a_stream_rate_limit_the_server_forbids_retrying_still_holds_the_key() {
    // A stream's `rate_limit_error` event on a head saying
    // `x-should-retry: false` and `retry-after: 30`: final for the request,
    // news for the key, as the same 429 status is.
    #[derive(Debug)]
    struct Event(HeaderMap);
    impl std::fmt::Display for Event {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("rate_limit_error event")
        }
    }
    impl std::error::Error for Event {}
    impl crate::classify::Reported for Event {
        fn classification(&self) -> Classification {
            Classification::Retryable(RetryableKind::RateLimited)
        }
        fn response_head(&self) -> Option<(StatusCode, &HeaderMap)> {
            Some((StatusCode::OK, &self.0))
        }
    }
    let p = RetryPolicy::builder().recognise::<Event>().build().unwrap();
    let event = Event(headers(&[
        ("x-should-retry", "false"),
        ("retry-after", "30"),
    ]));
    let j = p.judge(&after(1), Outcome::Error(&event), Duration::ZERO);
    assert!(matches!(
        j.decision,
        Decision::Stop(StopReason::NotRetryable(_))
    ));
    assert_eq!(
        j.key,
        crate::rate_limit::KeyNews::Throttled {
            wait: Some(Duration::from_secs(30)),
            rate: true,
            holds_key: true,
            whole_seconds: true,
            window: None,
            tokens: None,
            final_answer: true,
        }
    );
}

#[test]
fn only_outcomes_that_prove_nothing_was_executed_are_rejections() {
    use super::super::RejectionKind as K;
    let p = policy();
    let none = HeaderMap::new();
    let wait = headers(&[("retry-after", "3")]);
    let declined = headers(&[("retry-after", "3"), ("x-should-retry", "false")]);
    let overloaded =
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    type Expected = Option<(K, Option<u64>)>;
    let cases: [(u16, &HeaderMap, &[u8], Expected); 9] = [
        (429, &wait, b"", Some((K::RateLimited, Some(3)))),
        // `x-should-retry: false` forbids a resend, not another upstream.
        (429, &declined, b"", Some((K::RateLimited, Some(3)))),
        (429, &none, b"", Some((K::RateLimited, None))),
        (529, &none, b"", Some((K::Overloaded, None))),
        (503, &none, overloaded, Some((K::Overloaded, None))),
        (503, &wait, b"", None),
        (500, &none, b"", None),
        (401, &none, b"", None),
        (200, &none, b"", None),
    ];
    for (status, h, body, expected) in cases {
        let j = judge(&p, 1, status, h, body);
        let got = j.rejection.map(|r| (r.kind, r.wait.map(|w| w.as_secs())));
        assert_eq!(got, expected, "{status} {h:?}");
    }
    let error = |kind| std::io::Error::new(kind, "boom");
    let refused = error(std::io::ErrorKind::ConnectionRefused);
    let j = p.judge(&after(1), Outcome::Error(&refused), Duration::ZERO);
    assert_eq!(j.rejection.map(|r| r.kind), Some(K::NotConnected));
    let reset = error(std::io::ErrorKind::ConnectionReset);
    let j = p.judge(&after(1), Outcome::Error(&reset), Duration::ZERO);
    assert_eq!(
        j.rejection, None,
        "a reset may come after the request was written"
    );
    let held = crate::rate_limit::GateError::HeldTooLong {
        asked: Duration::from_secs(9),
        limit: Duration::from_secs(5),
    };
    let j = p.judge(&after(1), Outcome::Error(&held), Duration::ZERO);
    assert_eq!(
        j.rejection.map(|r| (r.kind, r.wait)),
        Some((K::NotSent, Some(Duration::from_secs(9))))
    );
}

/// Judges `statuses` one after another as one request's sends, recording
/// each outcome as the retry loop does; returns the last judgement.
fn judge_in_turn(p: &RetryPolicy, statuses: &[u16]) -> Judgement {
    let mut state = RetryState::new();
    let mut last = None;
    for status in statuses {
        state.record_send();
        let status = StatusCode::from_u16(*status).unwrap();
        let outcome = Outcome::Response {
            status,
            headers: &HeaderMap::new(),
            body: Some(b""),
        };
        let judgement = p.judge(&state, outcome, Duration::ZERO);
        state.record_outcome(Some(status), &judgement);
        state.record_wait(Duration::from_millis(1), false);
        last = Some(judgement);
    }
    last.unwrap()
}

#[test]
fn only_overloads_count_towards_the_overload_streak() {
    let p = policy();
    match judge_in_turn(&p, &[529, 529, 529]).decision {
        Decision::Stop(StopReason::OverloadedRepeatedly { count: 3 }) => {}
        other => panic!("the third overload in a row stops: {other:?}"),
    }
    match judge_in_turn(&p, &[429, 429, 429]).decision {
        Decision::Retry { .. } => {}
        other => panic!("rate limits are no overloads: {other:?}"),
    }
    match judge_in_turn(&p, &[529, 503, 529]).decision {
        Decision::Retry { .. } => {}
        other => panic!("a 503 breaks the streak: {other:?}"),
    }
}

#[test]
fn a_rate_limit_under_a_pacing_gate_is_not_charged_to_the_budget() {
    let p = policy();
    let charged = |status: u16, paced: bool| {
        let mut state = after(1);
        state.set_gate(Some(gate(paced, 0)));
        let outcome = Outcome::Response {
            status: StatusCode::from_u16(status).unwrap(),
            headers: &HeaderMap::new(),
            body: Some(b""),
        };
        match p.judge(&state, outcome, Duration::ZERO).decision {
            Decision::Retry { charged, .. } => charged,
            other => panic!("{other:?}"),
        }
    };
    assert!(
        !charged(429, true),
        "the gate paces the key: its wait is no retry storm"
    );
    assert!(charged(429, false));
    assert!(
        charged(503, true),
        "only a rate limit is the gate's to pace"
    );
}

#[test]
fn a_success_through_a_gate_is_served_news_with_the_stated_window() {
    let p = policy();
    let h = headers(&[
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-requests", "59"),
        ("x-ratelimit-reset-requests", "1s"),
    ]);
    let mut gated = after(1);
    gated.set_gate(Some(gate(false, 0)));
    let key = |state: &RetryState, body: Option<&'static [u8]>| {
        let outcome = Outcome::Response {
            status: StatusCode::OK,
            headers: &h,
            body,
        };
        p.judge(state, outcome, Duration::ZERO).key
    };
    // With no body (answered at once) or a body read (a success the
    // layer peeked at), the same news.
    for body in [None, Some(&br#"{"type":"message"}"#[..])] {
        assert!(
            matches!(
                key(&gated, body),
                KeyNews::Served {
                    window: Some(_),
                    ..
                }
            ),
            "{body:?}"
        );
    }
    // No gate took the send: its quota headers are not read.
    assert!(matches!(
        key(&after(1), None),
        KeyNews::Served { window: None, .. } | KeyNews::None
    ));
}

#[test]
fn a_success_is_final_whatever_x_should_retry_says() {
    let p = policy();
    for value in ["false", "true"] {
        let h = headers(&[("x-should-retry", value)]);
        let j = judge(&p, 1, 200, &h, br#"{"type":"message"}"#);
        assert!(matches!(j.decision, Decision::Accept), "{value}: {j:?}");
        assert_eq!(j.class, Classification::Success);
    }
}

#[test]
fn only_an_answer_proves_a_rate_limit_or_an_overload_and_only_no_answer_a_failed_connect() {
    use super::super::RejectionKind as K;
    /// An error of a layer of the caller's, claiming `class`, with a head
    /// when it carries one.
    #[derive(Debug)]
    struct Claim(Classification, Option<HeaderMap>);
    impl std::fmt::Display for Claim {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a layer's claim")
        }
    }
    impl std::error::Error for Claim {}
    impl crate::classify::Reported for Claim {
        fn classification(&self) -> Classification {
            self.0.clone()
        }
        fn response_head(&self) -> Option<(StatusCode, &HeaderMap)> {
            self.1.as_ref().map(|h| (StatusCode::OK, h))
        }
    }
    let p = RetryPolicy::builder().recognise::<Claim>().build().unwrap();
    let rejection = |kind, head: Option<HeaderMap>| {
        let claim = Claim(Classification::Retryable(kind), head);
        let j = p.judge(&after(1), Outcome::Error(&claim), Duration::ZERO);
        j.rejection.map(|r| r.kind)
    };
    let head = || Some(HeaderMap::new());
    assert_eq!(
        rejection(RetryableKind::RateLimited, head()),
        Some(K::RateLimited)
    );
    assert_eq!(rejection(RetryableKind::RateLimited, None), None);
    assert_eq!(
        rejection(RetryableKind::Overloaded, head()),
        Some(K::Overloaded)
    );
    assert_eq!(rejection(RetryableKind::Overloaded, None), None);
    assert_eq!(
        rejection(RetryableKind::Connect, None),
        Some(K::NotConnected)
    );
    assert_eq!(
        rejection(RetryableKind::Connect, head()),
        None,
        "an answer came, so a connection was made"
    );
}

fn gate(paced: bool, booked_tokens: u64) -> crate::rate_limit::link::GateSend {
    crate::rate_limit::link::GateSend {
        paced,
        booked_tokens,
        ..Default::default()
    }
}

#[test]
fn the_judge_decides_whether_a_token_refusal_holds_the_key_or_the_request() {
    use crate::rate_limit::KeyNews;
    let p = policy();
    let news = |h: &HeaderMap, booked: u64| {
        let mut state = after(1);
        state.set_gate(Some(gate(true, booked)));
        let outcome = Outcome::Response {
            status: StatusCode::TOO_MANY_REQUESTS,
            headers: h,
            body: None,
        };
        match p.judge(&state, outcome, Duration::ZERO).key {
            KeyNews::Throttled {
                rate, holds_key, ..
            } => (rate, holds_key),
            other => panic!("{other:?}"),
        }
    };
    let tokens_out = headers(&[
        ("retry-after", "2"),
        ("x-ratelimit-limit-tokens", "1000"),
        ("x-ratelimit-remaining-tokens", "0"),
        ("x-ratelimit-reset-tokens", "2s"),
    ]);
    // Only tokens ran out: no news about the rate. A send that booked
    // its tokens waits alone; one that booked none holds the key.
    assert_eq!(news(&tokens_out, 300), (false, false));
    assert_eq!(news(&tokens_out, 0), (false, true));
    // Requests left, but fewer tokens than the send booked: its own.
    let short = headers(&[
        ("retry-after", "2"),
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-requests", "30"),
        ("x-ratelimit-reset-requests", "1s"),
        ("x-ratelimit-limit-tokens", "1000"),
        ("x-ratelimit-remaining-tokens", "100"),
        ("x-ratelimit-reset-tokens", "2s"),
    ]);
    assert_eq!(news(&short, 300), (false, false));
    assert_eq!(
        news(&short, 50),
        (true, true),
        "enough tokens: the rate's news"
    );
    assert_eq!(news(&headers(&[("retry-after", "2")]), 300), (true, true));
}

#[test]
fn the_judge_sends_a_resend_to_wait_in_the_gate_only_where_the_gate_took_the_wait() {
    use crate::rate_limit::link::GateWait;
    let p = policy();
    let in_gate = |status: u16, h: &HeaderMap, paced: bool, wait: GateWait| {
        let mut state = after(1);
        state.set_gate(Some(gate(paced, 0)));
        state.set_gate_wait(wait);
        let outcome = Outcome::Response {
            status: StatusCode::from_u16(status).unwrap(),
            headers: h,
            body: None,
        };
        match p.judge(&state, outcome, Duration::ZERO).decision {
            Decision::Retry { in_gate, .. } => in_gate,
            other => panic!("{other:?}"),
        }
    };
    let named = headers(&[("retry-after", "2")]);
    let none = HeaderMap::new();
    assert!(in_gate(429, &named, true, GateWait::KeyHeld));
    assert!(
        !in_gate(429, &named, false, GateWait::KeyHeld),
        "a gate that only holds does not pace the release"
    );
    assert!(
        !in_gate(429, &named, true, GateWait::Own),
        "a doubted hold: the request waits its own wait"
    );
    assert!(in_gate(529, &none, true, GateWait::SlotMetered));
    assert!(
        !in_gate(529, &named, true, GateWait::SlotMetered),
        "a named wait is slept"
    );
    assert!(!in_gate(529, &none, true, GateWait::Own));
}
