//! When the policy changes the next attempt instead of repeating it, and
//! when it refuses to.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::backoff::Jitter;
use crate::policy::Outcome;
use http::StatusCode;

fn overflow(input: u64, max_tokens: u64) -> String {
    format!(
        r#"{{"type":"error","error":{{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: {input} + {max_tokens} > 200000"}}}}"#
    )
}

fn judged(p: &RetryPolicy, state: &RetryState, status: u16, body: &[u8]) -> Decision {
    let outcome = Outcome::Response {
        status: StatusCode::from_u16(status).unwrap(),
        headers: &HeaderMap::new(),
        body: Some(body),
    };
    p.judge(state, outcome, Duration::ZERO).decision
}

fn sent_once() -> RetryState {
    let mut state = RetryState::new();
    state.record_send();
    state
}

#[test]
fn a_context_overflow_cuts_max_tokens_once_and_only_downwards() {
    let p = RetryPolicy::default();
    // Room: 200000 - 190000 - the 1000 margin.
    let body = overflow(190_000, 20_000);
    assert_eq!(
        judged(&p, &sent_once(), 400, body.as_bytes()),
        Decision::Recover(Recovery::CutMaxTokens { to: 9_000 })
    );
    let mut cut = sent_once();
    cut.record_recovery(&Recovery::CutMaxTokens { to: 9_000 });
    assert!(matches!(
        judged(&p, &cut, 400, body.as_bytes()),
        Decision::Stop(StopReason::NotRetryable(FatalKind::ContextOverflow(_)))
    ));
    // The floor (3000) is all that is left: asking for it again, or for
    // less, would fail the same way.
    for asked in [3_000, 2_500] {
        let body = overflow(198_500, asked);
        assert!(
            matches!(
                judged(&p, &sent_once(), 400, body.as_bytes()),
                Decision::Stop(StopReason::RecoveryFailed {
                    action: RecoveryAction::CutMaxTokens,
                    ..
                })
            ),
            "{asked}"
        );
    }
    let body = overflow(198_500, 3_001);
    assert_eq!(
        judged(&p, &sent_once(), 400, body.as_bytes()),
        Decision::Recover(Recovery::CutMaxTokens { to: 3_000 })
    );
    let off = RetryPolicy::builder()
        .context_overflow_cut(None)
        .build()
        .unwrap();
    assert!(matches!(
        judged(
            &off,
            &sent_once(),
            400,
            overflow(190_000, 20_000).as_bytes()
        ),
        Decision::Stop(StopReason::NotRetryable(_))
    ));
}

struct Fresh;

impl RefreshCredentials for Fresh {
    fn refresh(&self) -> CredentialsFuture {
        Box::pin(async { Ok(HeaderMap::new()) })
    }
}

#[test]
fn a_401_refreshes_credentials_once_and_only_with_a_hook() {
    let unauthorized = |p: &RetryPolicy, state: &RetryState| judged(p, state, 401, b"");
    let without = RetryPolicy::default();
    assert_eq!(
        unauthorized(&without, &sent_once()),
        Decision::Stop(StopReason::NotRetryable(FatalKind::Unauthorized))
    );
    let with = RetryPolicy::builder()
        .refresh_credentials(Fresh)
        .build()
        .unwrap();
    assert_eq!(
        unauthorized(&with, &sent_once()),
        Decision::Recover(Recovery::RefreshCredentials)
    );
    let mut refreshed = sent_once();
    refreshed.record_recovery(&Recovery::RefreshCredentials);
    assert_eq!(
        unauthorized(&with, &refreshed),
        Decision::Stop(StopReason::NotRetryable(FatalKind::Unauthorized))
    );
}

/// Judges a 529 for `state`'s last send and records it, as the loop does.
fn record_overload(p: &RetryPolicy, state: &mut RetryState) {
    let status = StatusCode::from_u16(529).unwrap();
    let outcome = Outcome::Response {
        status,
        headers: &HeaderMap::new(),
        body: Some(b""),
    };
    let judgement = p.judge(state, outcome, Duration::ZERO);
    state.record_outcome(Some(status), &judgement);
}

/// A request whose last `n` sends were overloaded.
fn overloaded(p: &RetryPolicy, n: u32) -> RetryState {
    let mut state = RetryState::new();
    for _ in 0..n {
        state.record_send();
        record_overload(p, &mut state);
        state.record_wait(Duration::from_millis(1), false);
    }
    state.record_send();
    state
}

#[test]
fn an_overload_streak_acts_at_its_limit_and_the_fallback_applies_once() {
    let p = |limit: u32, fallback: Option<FallbackMode>| {
        let builder = RetryPolicy::builder()
            .jitter(Jitter::None)
            .max_consecutive_overloads(limit);
        match fallback {
            Some(mode) => builder.fallback_model("claude-haiku-4-5", mode),
            None => builder,
        }
        .build()
        .unwrap()
    };
    let plain = p(2, None);
    assert_eq!(overloaded(&plain, 0).consecutive_overloads(), 0);
    assert_eq!(overloaded(&plain, 1).consecutive_overloads(), 1);
    assert!(matches!(
        judged(&plain, &overloaded(&plain, 0), 529, b""),
        Decision::Retry { .. }
    ));
    assert_eq!(
        judged(&plain, &overloaded(&plain, 1), 529, b""),
        Decision::Stop(StopReason::OverloadedRepeatedly { count: 2 })
    );
    let never = p(0, None);
    assert!(
        matches!(
            judged(&never, &overloaded(&never, 5), 529, b""),
            Decision::Retry { .. }
        ),
        "0 turns the streak off"
    );
    let automatic = p(2, Some(FallbackMode::Automatic));
    assert_eq!(
        judged(&automatic, &overloaded(&automatic, 1), 529, b""),
        Decision::Recover(Recovery::FallbackModel {
            model: "claude-haiku-4-5".into()
        })
    );
    let mut fell_back = overloaded(&automatic, 1);
    fell_back.record_recovery(&Recovery::FallbackModel {
        model: "claude-haiku-4-5".into(),
    });
    // On the fallback model, a new streak: one overload, then a second.
    let mut state = fell_back;
    record_overload(&automatic, &mut state);
    state.record_send();
    assert_eq!(
        judged(&automatic, &state, 529, b""),
        Decision::Stop(StopReason::OverloadedRepeatedly { count: 2 }),
        "the fallback applies once"
    );
    let manual = p(2, Some(FallbackMode::Manual));
    assert_eq!(
        judged(&manual, &overloaded(&manual, 1), 529, b""),
        Decision::Stop(StopReason::FallbackTriggered {
            model: "claude-haiku-4-5".into()
        })
    );
}

#[test]
fn each_recovery_has_a_label_and_words() {
    let all = [
        (
            RecoveryAction::CutMaxTokens,
            "cut_max_tokens",
            "max_tokens cut",
        ),
        (
            RecoveryAction::FallbackModel,
            "fallback_model",
            "fallback model",
        ),
        (
            RecoveryAction::RefreshCredentials,
            "refresh_credentials",
            "credential refresh",
        ),
    ];
    for (action, label, words) in all {
        assert_eq!(action.label(), label);
        assert_eq!(action.to_string(), words);
    }
}
