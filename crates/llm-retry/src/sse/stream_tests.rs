//! Whole streams as the providers send them, read the way the stream guard
//! reads them: events in order until the first one that is not non-content.

#![allow(clippy::unwrap_used)]

use super::{classify_stream_error, EventKind, EventRules, SseDecoder};
use crate::classify::{Classification, RetryableKind};

const ANTHROPIC_TEXT: &str = "event: message_start
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-20250514\",\"stop_reason\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}

event: content_block_start
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}

event: ping
data: {\"type\": \"ping\"}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}

";

const ANTHROPIC_OVERLOADED: &str = "event: error
data: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}

";

const CHAT_TEXT: &str = "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}]}

data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"logprobs\":null,\"finish_reason\":null}]}

";

const CHAT_ERROR: &str = "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}

data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"tokens\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}

";

const CHAT_DONE_EARLY: &str = "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}

data: [DONE]

";

const RESPONSES_FAILED: &str = "event: response.created
data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"error\":null,\"output\":[]}}

event: response.in_progress
data: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"error\":null,\"output\":[]}}

event: response.failed
data: {\"type\":\"response.failed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_1\",\"status\":\"failed\",\"error\":{\"code\":\"server_is_overloaded\",\"message\":\"busy\"},\"output\":[]}}

";

/// The first event that is not non-content, or `None` if the stream ended first.
fn first_decisive(stream: &[u8], chunk: usize) -> Option<EventKind> {
    let mut decoder = SseDecoder::new(64 * 1024);
    let rules = EventRules::default();
    let mut events = Vec::new();
    for part in stream.chunks(chunk) {
        decoder.feed(part).unwrap();
        events.extend(std::iter::from_fn(|| decoder.next_event()));
    }
    events.extend(std::iter::from_fn(|| decoder.finish()));
    events
        .iter()
        .map(|event| rules.classify(event))
        .find(|kind| *kind != EventKind::NonContent)
}

#[test]
fn first_decisive_event() {
    let class = |kind| match kind {
        Some(EventKind::Error { class, .. }) => Some(class),
        _ => None,
    };
    let truncated = &ANTHROPIC_TEXT[..ANTHROPIC_TEXT.len() - 2];
    let cases: Vec<(&str, Option<EventKind>, Option<Classification>)> = vec![
        (ANTHROPIC_TEXT, Some(EventKind::Content), None),
        (
            ANTHROPIC_OVERLOADED,
            None,
            Some(Classification::Retryable(RetryableKind::Overloaded)),
        ),
        (CHAT_TEXT, Some(EventKind::Content), None),
        (
            CHAT_ERROR,
            None,
            Some(Classification::Retryable(RetryableKind::RateLimited)),
        ),
        (CHAT_DONE_EARLY, Some(EventKind::Done), None),
        (
            RESPONSES_FAILED,
            None,
            Some(Classification::Retryable(RetryableKind::Overloaded)),
        ),
        // Ended before content: nothing decisive.
        ("", None, None),
        (": keep-alive\n\n", None, None),
        ("event: error\n\n", None, None),
        (truncated, None, None),
    ];
    for (stream, kind, error) in cases {
        for ending in ["\n", "\r\n", "\r"] {
            let stream = format!("\u{feff}{}", stream.replace('\n', ending));
            for chunk in [1, 7, 100, stream.len().max(1)] {
                let got = first_decisive(stream.as_bytes(), chunk);
                match &error {
                    Some(want) => assert_eq!(class(got).as_ref(), Some(want), "{stream}"),
                    None => assert_eq!(got, kind, "{stream:?} in chunks of {chunk}"),
                }
            }
        }
    }
    assert_eq!(
        classify_stream_error(None),
        Classification::Retryable(RetryableKind::Status(
            http::StatusCode::INTERNAL_SERVER_ERROR
        ))
    );
}
