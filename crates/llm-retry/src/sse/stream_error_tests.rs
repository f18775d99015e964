//! The stream-error table, with payloads as the providers send them.

use super::*;
use crate::classify::{ContextOverflow, FatalKind, RetryableKind};
use Classification::{Fatal, Retryable};

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT)
}

#[test]
fn stream_error_table() {
    let s = status;
    let overflow = ContextOverflow {
        input_tokens: Some(100000),
        max_tokens: Some(30000),
        context_limit: Some(128000),
    };
    let cases: Vec<(&str, Classification)> = vec![
        // Anthropic `event: error` data.
        (
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            Retryable(RetryableKind::Overloaded),
        ),
        (
            r#"{"type":"error","error":{"details":null,"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
            Retryable(RetryableKind::RateLimited),
        ),
        (
            r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
            Retryable(RetryableKind::Status(s(500))),
        ),
        (
            r#"{"type":"error","error":{"type":"timeout_error","message":"Request timed out"}}"#,
            Retryable(RetryableKind::Status(s(504))),
        ),
        (
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: text content blocks must be non-empty"}}"#,
            Fatal(FatalKind::Status(s(400))),
        ),
        (
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}"#,
            Fatal(FatalKind::QuotaExhausted(s(400))),
        ),
        (
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
            Fatal(FatalKind::Unauthorized),
        ),
        (
            r#"{"type":"error","error":{"type":"billing_error","message":"billing"}}"#,
            Fatal(FatalKind::QuotaExhausted(s(402))),
        ),
        (
            r#"{"type":"error","error":{"type":"permission_error","message":"no"}}"#,
            Fatal(FatalKind::Status(s(403))),
        ),
        (
            r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-x"}}"#,
            Fatal(FatalKind::Status(s(404))),
        ),
        (
            r#"{"type":"error","error":{"type":"request_too_large","message":"too big"}}"#,
            Fatal(FatalKind::Status(s(413))),
        ),
        // Chat Completions in-band errors.
        (
            r#"{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}"#,
            Retryable(RetryableKind::Status(s(500))),
        ),
        (
            r#"{"error":{"message":"Rate limit reached for gpt-4o","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#,
            Retryable(RetryableKind::RateLimited),
        ),
        (
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
            Fatal(FatalKind::QuotaExhausted(s(429))),
        ),
        (
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
            Fatal(FatalKind::Unauthorized),
        ),
        (
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, you requested 130000 tokens (100000 in the messages, 30000 in the completion).","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            Fatal(FatalKind::ContextOverflow(overflow)),
        ),
        (
            r#"{"error":{"message":"m","type":"x","code":503}}"#,
            Retryable(RetryableKind::Status(s(503))),
        ),
        (
            r#"{"error":{"message":"m","code":"429"}}"#,
            Retryable(RetryableKind::RateLimited),
        ),
        (
            r#"{"error":{"message":"m","code":200}}"#,
            Retryable(RetryableKind::Status(s(500))),
        ),
        (
            r#"{"error":"upstream overloaded"}"#,
            Retryable(RetryableKind::Status(s(500))),
        ),
        (
            r#"{"error":"You exceeded your current quota"}"#,
            Fatal(FatalKind::QuotaExhausted(s(429))),
        ),
        // Responses API: fields at the top, and `response.failed`.
        (
            r#"{"type":"error","code":"server_error","message":"An error occurred","param":null,"sequence_number":1}"#,
            Retryable(RetryableKind::Status(s(500))),
        ),
        (
            r#"{"type":"error","code":"rate_limit_exceeded","message":"slow down","param":null,"sequence_number":1}"#,
            Retryable(RetryableKind::RateLimited),
        ),
        (
            r#"{"type":"error","code":"server_is_overloaded","message":"busy","sequence_number":1}"#,
            Retryable(RetryableKind::Overloaded),
        ),
        (
            r#"{"type":"error","code":"overloaded","message":"busy"}"#,
            Retryable(RetryableKind::Overloaded),
        ),
        (
            r#"{"type":"error","code":"insufficient_quota","message":"quota"}"#,
            Fatal(FatalKind::QuotaExhausted(s(429))),
        ),
        (
            r#"{"type":"error","code":"invalid_prompt","message":"bad"}"#,
            Fatal(FatalKind::Status(s(400))),
        ),
        (
            r#"{"type":"error","code":"ERR_SOMETHING","message":"Something went wrong","param":null,"sequence_number":1}"#,
            Retryable(RetryableKind::Status(s(500))),
        ),
        (
            r#"{"type":"response.failed","sequence_number":5,"response":{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error","message":"The model failed to generate a response."},"output":[]}}"#,
            Retryable(RetryableKind::Status(s(500))),
        ),
        (
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"rate_limit_exceeded","message":"m"}}}"#,
            Retryable(RetryableKind::RateLimited),
        ),
        (
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"insufficient_quota","message":"m"}}}"#,
            Fatal(FatalKind::QuotaExhausted(s(429))),
        ),
        (
            r#"{"type":"response.failed","response":{"status":"failed","error":null}}"#,
            Retryable(RetryableKind::Status(s(500))),
        ),
        // Nothing to read: a server fault.
        ("", Retryable(RetryableKind::Status(s(500)))),
        ("Overloaded", Retryable(RetryableKind::Status(s(500)))),
        (
            r#"{"type":"error"}"#,
            Retryable(RetryableKind::Status(s(500))),
        ),
        (
            r#"{"type":"error","error":{}}"#,
            Retryable(RetryableKind::Status(s(500))),
        ),
    ];
    for (data, want) in cases {
        let provider = provider_error(data);
        assert_eq!(classify_stream_error(provider.as_ref()), want, "{data}");
    }
}

#[test]
fn provider_error_shapes() {
    let pe = |kind: Option<&str>, code: Option<&str>, message: Option<&str>| ProviderError {
        kind: kind.map(str::to_owned),
        code: code.map(str::to_owned),
        message: message.map(str::to_owned),
    };
    let cases = [
        (
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            Some(pe(Some("overloaded_error"), None, Some("Overloaded"))),
        ),
        (
            r#"{"type":"error","code":"server_error","message":"m","param":null}"#,
            Some(pe(None, Some("server_error"), Some("m"))),
        ),
        (
            r#"{"type":"error","code":42}"#,
            Some(pe(None, Some("42"), None)),
        ),
        (
            r#"{"type":"response.failed","response":{"error":{"code":"server_error","message":"m"}}}"#,
            Some(pe(None, Some("server_error"), Some("m"))),
        ),
        (
            r#"{"type":"response.failed","response":{"error":{"type":"t","code":"","message":""}}}"#,
            Some(pe(Some("t"), None, None)),
        ),
        (r#"{"type":"response.failed","response":{}}"#, None),
        (r#"{"type":"response.failed"}"#, None),
        (r#"{"type":"error"}"#, None),
        (r#"{"error":null}"#, None),
        (r#"[1]"#, None),
        ("not json", None),
    ];
    for (data, want) in cases {
        assert_eq!(provider_error(data), want, "{data}");
    }
}
