//! Realistic first events from Anthropic Messages, OpenAI Chat Completions
//! and OpenAI Responses streams.

use super::*;
use crate::classify::{FatalKind, RetryableKind};
use http::StatusCode;
use Classification::{Fatal, Retryable};

/// The expected kind; errors are compared by class.
#[derive(Debug, PartialEq)]
enum Want {
    Content,
    Non,
    Done,
    Err(Classification),
}

fn want_of(kind: EventKind) -> Want {
    match kind {
        EventKind::Content => Want::Content,
        EventKind::NonContent => Want::Non,
        EventKind::Done => Want::Done,
        EventKind::Error { class, .. } => Want::Err(class),
    }
}

fn event(name: Option<&str>, data: &str) -> SseEvent {
    SseEvent {
        event: name.map(str::to_owned),
        data: data.to_owned(),
        id: None,
    }
}

/// Classifies each `(name, data)` with the default rules.
fn check<'a>(cases: impl IntoIterator<Item = (Option<&'a str>, &'a str, Want)>) {
    for (name, data, want) in cases {
        let got = want_of(EventRules::default().classify(&event(name, data)));
        assert_eq!(got, want, "{name:?}: {data}");
    }
}

const R500: Want = Want::Err(Retryable(RetryableKind::Status(
    StatusCode::INTERNAL_SERVER_ERROR,
)));
const OVERLOADED: Want = Want::Err(Retryable(RetryableKind::Overloaded));
const RATE: Want = Want::Err(Retryable(RetryableKind::RateLimited));

#[test]
fn anthropic_messages() {
    let cases = [
        (
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-20250514","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}"#,
            Want::Non,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            Want::Non,
        ),
        ("ping", r#"{"type": "ping"}"#, Want::Non),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
            Want::Content,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}"#,
            Want::Content,
        ),
        (
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
            Want::Content,
        ),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
            Want::Content,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#, Want::Content),
        (
            "error",
            r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
            OVERLOADED,
        ),
        (
            "error",
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"rate limited"}}"#,
            RATE,
        ),
        (
            "error",
            r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
            R500,
        ),
        (
            "error",
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#,
            Want::Err(Fatal(FatalKind::Status(StatusCode::BAD_REQUEST))),
        ),
        ("error", "", R500),
        ("error", "Overloaded", R500),
        ("error", "[DONE]", R500),
    ];
    check(cases.map(|(name, data, want)| (Some(name), data, want)));
}

#[test]
fn openai_chat_completions() {
    let head = r#""id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb""#;
    let chunk = |choices: &str| format!(r#"{{{head},"choices":[{choices}]}}"#);
    let cases = [
        (chunk(r#"{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}"#), Want::Non),
        (chunk(r#"{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}"#), Want::Content),
        (chunk(r#"{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}"#), Want::Content),
        (chunk(r#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}"#), Want::Content),
        (chunk(""), Want::Non),
        (format!(r#"{{{head},"choices":[],"usage":{{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}}}"#), Want::Non),
        (r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}"#.to_owned(), Want::Non),
        ("[DONE]".to_owned(), Want::Done),
        (" [DONE] ".to_owned(), Want::Done),
        (r#"{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}"#.to_owned(), R500),
        (r#"{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#.to_owned(), RATE),
        (r#"{"error":{"message":"quota","type":"insufficient_quota","code":"insufficient_quota"}}"#.to_owned(), Want::Err(Fatal(FatalKind::QuotaExhausted(StatusCode::TOO_MANY_REQUESTS)))),
        (r#"{"error":"upstream connect error"}"#.to_owned(), R500),
        // `"error": null` is no error.
        (format!(r#"{{{head},"error":null,"choices":[{{"index":0,"delta":{{"content":"Hi"}}}}]}}"#), Want::Content),
        (String::new(), Want::Non),
        ("  ".to_owned(), Want::Non),
        ("hello".to_owned(), Want::Content),
        ("{not json".to_owned(), Want::Content),
        ("[1,2]".to_owned(), Want::Content),
    ];
    for (data, want) in cases {
        for name in [None, Some("message")] {
            assert_eq!(
                want_of(EventRules::default().classify(&event(name, &data))),
                want,
                "{name:?}: {data}"
            );
        }
    }
}

#[test]
fn openai_responses() {
    let cases = [
        (
            Some("response.created"),
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_67c9","object":"response","created_at":1741290958,"status":"in_progress","error":null,"incomplete_details":null,"model":"gpt-4.1-2025-04-14","output":[]}}"#,
            Want::Non,
        ),
        (
            Some("response.in_progress"),
            r#"{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_67c9","status":"in_progress","error":null,"output":[]}}"#,
            Want::Non,
        ),
        (
            Some("response.output_item.added"),
            r#"{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_67c9","type":"message","status":"in_progress","role":"assistant","content":[]}}"#,
            Want::Non,
        ),
        (
            Some("response.content_part.added"),
            r#"{"type":"response.content_part.added","sequence_number":3,"item_id":"msg_67c9","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}"#,
            Want::Non,
        ),
        (
            Some("response.output_text.delta"),
            r#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_67c9","output_index":0,"content_index":0,"delta":"Hi"}"#,
            Want::Content,
        ),
        (
            Some("response.reasoning_summary_text.delta"),
            r#"{"type":"response.reasoning_summary_text.delta","delta":"**Thinking**"}"#,
            Want::Content,
        ),
        (
            Some("error"),
            r#"{"type":"error","code":"server_error","message":"An error occurred","param":null,"sequence_number":1}"#,
            R500,
        ),
        (
            Some("error"),
            r#"{"type":"error","code":"rate_limit_exceeded","message":"slow down","param":null,"sequence_number":1}"#,
            RATE,
        ),
        (
            Some("error"),
            r#"{"type":"error","code":"server_is_overloaded","message":"busy","sequence_number":1}"#,
            OVERLOADED,
        ),
        (
            Some("error"),
            r#"{"type":"error","sequence_number":2,"error":{"type":"invalid_request_error","code":"invalid_api_key","message":"bad key","param":null}}"#,
            Want::Err(Fatal(FatalKind::Unauthorized)),
        ),
        (
            Some("response.failed"),
            r#"{"type":"response.failed","sequence_number":5,"response":{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error","message":"The model failed to generate a response."},"output":[]}}"#,
            R500,
        ),
        (
            Some("response.failed"),
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"insufficient_quota","message":"quota"}}}"#,
            Want::Err(Fatal(FatalKind::QuotaExhausted(
                StatusCode::TOO_MANY_REQUESTS,
            ))),
        ),
        // A proxy that dropped the `event:` lines: read by `type`.
        (
            None,
            r#"{"type":"response.created","response":{"id":"resp_1","error":null}}"#,
            Want::Non,
        ),
        (None, r#"{"type":"ping"}"#, Want::Non),
        (
            None,
            r#"{"type":"error","code":"overloaded","message":"busy"}"#,
            OVERLOADED,
        ),
        (
            None,
            r#"{"type":"response.failed","response":{"error":{"code":"rate_limit_exceeded"}}}"#,
            RATE,
        ),
        (
            None,
            r#"{"type":"response.output_text.delta","delta":"Hi"}"#,
            Want::Content,
        ),
        // A named event is judged by its name alone.
        (
            Some("response.output_text.delta"),
            r#"{"error":{"type":"server_error"}}"#,
            Want::Content,
        ),
        (Some("response.completed"), "[DONE]", Want::Done),
    ];
    check(cases);
}

#[test]
fn error_keeps_the_provider_error() {
    let data = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let kind = EventRules::default().classify(&event(Some("error"), data));
    let EventKind::Error {
        provider: Some(provider),
        ..
    } = kind
    else {
        panic!("not an error with a provider: {kind:?}");
    };
    assert_eq!(provider.kind(), Some("overloaded_error"));
    assert_eq!(provider.message(), Some("Overloaded"));
}

#[test]
fn oversized_data_is_not_parsed() {
    let pad = "x".repeat(MAX_PARSED);
    let big_error = format!(r#"{{"error":{{"type":"overloaded_error"}},"pad":"{pad}"}}"#);
    let rules = EventRules::default();
    assert_eq!(rules.classify(&event(None, &big_error)), EventKind::Content);
    let kind = rules.classify(&event(Some("error"), &big_error));
    assert_eq!(
        kind,
        EventKind::Error {
            class: super::super::classify_stream_error(None),
            provider: None
        }
    );
    let small = &big_error[..big_error.len() - MAX_PARSED - 2];
    assert!(matches!(
        rules.classify(&event(None, &format!("{small}\"}}"))),
        EventKind::Error { .. }
    ));
}

#[test]
fn rules_can_be_edited() {
    let ping = event(Some("ping"), "{}");
    let keepalive = event(Some("keepalive"), "{}");
    let typed = event(None, r#"{"type":"keepalive"}"#);
    let default = EventRules::default();
    assert_eq!(default.classify(&ping), EventKind::NonContent);
    assert_eq!(default.classify(&keepalive), EventKind::Content);
    assert_eq!(default.classify(&typed), EventKind::Content);
    let edited = default
        .non_content_event("keepalive")
        .content_event("ping")
        .content_event("nope");
    assert_eq!(edited.classify(&ping), EventKind::Content);
    assert_eq!(edited.classify(&keepalive), EventKind::NonContent);
    assert_eq!(edited.classify(&typed), EventKind::NonContent);
    // Error and `[DONE]` rules cannot be switched off by names.
    let odd = EventRules::default()
        .non_content_event("error")
        .non_content_event("message");
    assert!(matches!(
        odd.classify(&event(Some("error"), "{}")),
        EventKind::Error { .. }
    ));
    assert_eq!(
        odd.classify(&event(Some("message"), "[DONE]")),
        EventKind::Done
    );
    assert_eq!(
        odd.classify(&event(Some("message"), "hi")),
        EventKind::Content
    );
}
