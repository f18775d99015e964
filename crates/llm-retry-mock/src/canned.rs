//! Provider-shaped presets: Anthropic Messages API and OpenAI
//! chat.completions bodies, error envelopes and SSE streams.
//!
//! The shapes follow the public API references closely enough for clients,
//! classifiers and stream parsers to treat them as the real thing; ids,
//! model names and token counts are fixed mock values.

use serde_json::{json, Value};

use crate::reply::Reply;
use crate::sse::SseEvent;

const ANTHROPIC_MODEL: &str = "claude-mock-1";
const ANTHROPIC_ID: &str = "msg_mock_0001";
const OPENAI_MODEL: &str = "gpt-mock-1";
const OPENAI_ID: &str = "chatcmpl-mock0001";
const OPENAI_CREATED: u64 = 1_700_000_000;
const INPUT_TOKENS: usize = 12;

/// A crude, deterministic token count: whitespace-separated words, at least 1.
fn tokens(text: &str) -> usize {
    text.split_whitespace().count().max(1)
}

impl Reply {
    /// `200` non-streamed Anthropic Messages API response whose single text
    /// block is `text` (`stop_reason: "end_turn"`).
    pub fn anthropic_ok(text: &str) -> Reply {
        Reply::json(
            200,
            json!({
                "id": ANTHROPIC_ID,
                "type": "message",
                "role": "assistant",
                "model": ANTHROPIC_MODEL,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": null,
                "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": tokens(text)}
            }),
        )
    }

    /// `200` non-streamed OpenAI chat.completions response whose single
    /// choice says `text` (`finish_reason: "stop"`).
    pub fn openai_ok(text: &str) -> Reply {
        let out = tokens(text);
        Reply::json(
            200,
            json!({
                "id": OPENAI_ID,
                "object": "chat.completion",
                "created": OPENAI_CREATED,
                "model": OPENAI_MODEL,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop"
                }],
                "usage": {
                    "prompt_tokens": INPUT_TOKENS,
                    "completion_tokens": out,
                    "total_tokens": INPUT_TOKENS + out
                }
            }),
        )
    }

    /// Anthropic error envelope:
    /// `{"type":"error","error":{"type":error_type,"message":message}}`.
    pub fn anthropic_error(code: u16, error_type: &str, message: &str) -> Reply {
        Reply::json(code, anthropic_error_body(error_type, message))
    }

    /// OpenAI error envelope:
    /// `{"error":{"message":…,"type":…,"param":null,"code":…}}`
    /// (`code` is `null` when `error_code` is `None`).
    pub fn openai_error(
        code: u16,
        error_type: &str,
        error_code: Option<&str>,
        message: &str,
    ) -> Reply {
        Reply::json(
            code,
            json!({
                "error": {
                    "message": message,
                    "type": error_type,
                    "param": null,
                    "code": error_code
                }
            }),
        )
    }

    /// `429` Anthropic `rate_limit_error`, with `retry-after: SECS` when
    /// `retry_after_secs` is `Some`.
    pub fn rate_limited(retry_after_secs: Option<u64>) -> Reply {
        let reply = Reply::anthropic_error(
            429,
            "rate_limit_error",
            "This request would exceed the rate limit for your organization. \
             Please try again later.",
        );
        match retry_after_secs {
            Some(secs) => reply.header("retry-after", &secs.to_string()),
            None => reply,
        }
    }

    /// `529` Anthropic `overloaded_error` ("Overloaded").
    pub fn overloaded() -> Reply {
        Reply::anthropic_error(529, "overloaded_error", "Overloaded")
    }

    /// A realistic Anthropic streamed response: `message_start`,
    /// `content_block_start`, `ping`, one `content_block_delta` per entry of
    /// `text_chunks`, `content_block_stop`, `message_delta`, `message_stop`.
    pub fn anthropic_stream(text_chunks: &[&str]) -> Reply {
        let out: usize = text_chunks.iter().map(|c| tokens(c)).sum();
        let mut events = vec![
            SseEvent::json(
                Some("message_start"),
                &json!({
                    "type": "message_start",
                    "message": {
                        "id": ANTHROPIC_ID,
                        "type": "message",
                        "role": "assistant",
                        "model": ANTHROPIC_MODEL,
                        "content": [],
                        "stop_reason": null,
                        "stop_sequence": null,
                        "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1}
                    }
                }),
            ),
            SseEvent::json(
                Some("content_block_start"),
                &json!({
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""}
                }),
            ),
            SseEvent::json(Some("ping"), &json!({"type": "ping"})),
        ];
        events.extend(text_chunks.iter().map(|chunk| {
            SseEvent::json(
                Some("content_block_delta"),
                &json!({
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": chunk}
                }),
            )
        }));
        events.extend([
            SseEvent::json(
                Some("content_block_stop"),
                &json!({"type": "content_block_stop", "index": 0}),
            ),
            SseEvent::json(
                Some("message_delta"),
                &json!({
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                    "usage": {"output_tokens": out}
                }),
            ),
            SseEvent::json(Some("message_stop"), &json!({"type": "message_stop"})),
        ]);
        Reply::sse(events)
    }

    /// A `200 text/event-stream` whose only event is an Anthropic
    /// `event: error` (how Anthropic reports e.g. `overloaded_error` after
    /// the status line was already sent).
    pub fn anthropic_stream_error(error_type: &str, message: &str) -> Reply {
        Reply::sse([SseEvent::json(
            Some("error"),
            &anthropic_error_body(error_type, message),
        )])
    }

    /// A realistic OpenAI chat.completions stream: a role chunk, one
    /// `delta.content` chunk per entry of `text_chunks`, a
    /// `finish_reason: "stop"` chunk, then `data: [DONE]`.
    pub fn openai_stream(text_chunks: &[&str]) -> Reply {
        let chunk = |delta: Value, finish: Value| {
            SseEvent::json(
                None,
                &json!({
                    "id": OPENAI_ID,
                    "object": "chat.completion.chunk",
                    "created": OPENAI_CREATED,
                    "model": OPENAI_MODEL,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
                }),
            )
        };
        let mut events = vec![chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )];
        events.extend(
            text_chunks
                .iter()
                .map(|text| chunk(json!({"content": text}), Value::Null)),
        );
        events.push(chunk(json!({}), json!("stop")));
        events.push(SseEvent::new(None, "[DONE]"));
        Reply::sse(events)
    }
}

fn anthropic_error_body(error_type: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_json(reply: &Reply) -> Value {
        let body = reply.expected_body().unwrap_or_default();
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    }

    fn sse_data(reply: &Reply) -> Vec<(String, String)> {
        let body = reply.expected_body().unwrap_or_default();
        let text = String::from_utf8(body.to_vec()).unwrap_or_default();
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let mut name = String::new();
                let mut data = String::new();
                for line in e.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        name = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data = v.to_owned();
                    }
                }
                (name, data)
            })
            .collect()
    }

    #[test]
    fn envelopes() {
        assert_eq!(
            body_json(&Reply::anthropic_ok("hi there"))["content"][0]["text"],
            "hi there"
        );
        assert_eq!(
            body_json(&Reply::openai_ok("yo"))["choices"][0]["message"]["content"],
            "yo"
        );
        let err = body_json(&Reply::overloaded());
        assert_eq!(err["type"], "error");
        assert_eq!(err["error"]["type"], "overloaded_error");
        let oa = body_json(&Reply::openai_error(
            429,
            "insufficient_quota",
            Some("insufficient_quota"),
            "m",
        ));
        assert_eq!(oa["error"]["code"], "insufficient_quota");
        let oa = body_json(&Reply::openai_error(500, "server_error", None, "m"));
        assert!(oa["error"]["code"].is_null());
    }

    #[test]
    fn rate_limited_header() {
        let Reply::Response(r) = Reply::rate_limited(Some(7)) else {
            panic!("response expected")
        };
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["retry-after"], "7");
        let Reply::Response(r) = Reply::rate_limited(None) else {
            panic!("response expected")
        };
        assert!(r.headers().get("retry-after").is_none());
    }

    #[test]
    fn anthropic_stream_order() {
        let events = sse_data(&Reply::anthropic_stream(&["Hel", "lo"]));
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let text: String = events
            .iter()
            .filter(|(n, _)| n == "content_block_delta")
            .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
            .filter_map(|v| v["delta"]["text"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(text, "Hello");
    }

    #[test]
    fn openai_stream_ends_with_done() {
        let events = sse_data(&Reply::openai_stream(&["a", "b"]));
        assert_eq!(events.len(), 5);
        assert_eq!(events[4].1, "[DONE]");
        assert!(events.iter().all(|(n, _)| n.is_empty()));
    }
}
