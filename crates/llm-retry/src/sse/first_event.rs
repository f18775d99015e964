//! Is this event content? [`EventRules::classify`] sorts the events before
//! the first content event.

use super::{chunk, stream_error, SseEvent};
use crate::classify::{Classification, ProviderError};
use serde_json::Value;
use std::collections::BTreeSet;

/// Data longer than this is never parsed: such an event is content, unless
/// it is an error event (then an error with no provider details).
const MAX_PARSED: usize = 64 * 1024;

/// Event names that carry no output by default: Anthropic's `ping`,
/// `message_start`, `content_block_start`; OpenAI Responses' envelopes.
const DEFAULT_NON_CONTENT: [&str; 7] = [
    "ping",
    "message_start",
    "content_block_start",
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
];

/// What one event means for an attempt that has not forwarded anything yet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// Real output: the attempt commits once this event is forwarded.
    Content,
    /// No output (a ping, an envelope): keep holding.
    NonContent,
    /// An error reported before any content.
    Error {
        /// The error, mapped by [`classify_stream_error`](super::classify_stream_error).
        class: Classification,
        /// The provider's error object, when the data held one.
        provider: Option<ProviderError>,
    },
    /// OpenAI's `data: [DONE]`: the stream is over.
    Done,
}

/// Which events of a streamed response carry no content (pings,
/// envelopes), for [`StreamGuardLayer::event_rules`](crate::stream_guard::StreamGuardLayer::event_rules):
/// the guard holds the response back until the first event that does.
#[derive(Debug, Clone)]
pub struct EventRules {
    non_content: BTreeSet<String>,
}

impl Default for EventRules {
    /// `ping`, `message_start`, `content_block_start`, `response.created`,
    /// `response.in_progress`, `response.output_item.added` and
    /// `response.content_part.added` carry no content.
    fn default() -> Self {
        EventRules {
            non_content: DEFAULT_NON_CONTENT.iter().map(|&n| n.to_owned()).collect(),
        }
    }
}

impl EventRules {
    /// Treats events named `name` (or data-only events whose JSON `type`
    /// is `name`) as carrying no content.
    pub fn non_content_event(mut self, name: &str) -> Self {
        self.non_content.insert(name.to_owned());
        self
    }

    /// Treats events named `name` as content (removes it from the
    /// non-content names).
    pub fn content_event(mut self, name: &str) -> Self {
        self.non_content.remove(name);
        self
    }

    /// What `event` means before any content, by the first rule that applies:
    ///
    /// 1. `event: error` (any data) and `event: response.failed` →
    ///    [`EventKind::Error`], the data read as a provider error in any of
    ///    the Anthropic, Chat Completions and Responses shapes.
    /// 2. `data: [DONE]` → [`EventKind::Done`].
    /// 3. A name in the non-content set → [`EventKind::NonContent`]; any other
    ///    name but `message` → [`EventKind::Content`] (no JSON parsed).
    ///
    /// Data-only events (no name, or `message`) are read as JSON:
    ///
    /// 4. Blank data → non-content. Data over 64 KiB, or not a JSON object
    ///    → content.
    /// 5. A top-level `error` (Chat Completions mid-stream error) → error.
    /// 6. `"type":"error"` (Responses, fields at the top) or
    ///    `"type":"response.failed"` → error; a `type` in the non-content
    ///    set → non-content (a proxy that dropped the `event:` lines).
    /// 7. A Chat Completions chunk: content only when a choice carries
    ///    output (text, tool calls, refusal, reasoning, audio… or a
    ///    `finish_reason`); a role-only first chunk or a usage-only chunk
    ///    is non-content.
    /// 8. Anything else → content: an unknown event commits.
    pub(crate) fn classify(&self, event: &SseEvent) -> EventKind {
        let data = event.data.as_str();
        if let Some("error" | "response.failed") = event.event.as_deref() {
            return error_event(data);
        }
        if data.trim() == "[DONE]" {
            return EventKind::Done;
        }
        match event.event.as_deref() {
            None | Some("message") => self.classify_data(data),
            Some(name) if self.non_content.contains(name) => EventKind::NonContent,
            Some(_) => EventKind::Content,
        }
    }

    /// Rules 4 to 8, for a data-only event.
    fn classify_data(&self, data: &str) -> EventKind {
        let trimmed = data.trim();
        if trimmed.is_empty() {
            return EventKind::NonContent;
        }
        if data.len() > MAX_PARSED || !trimmed.starts_with('{') {
            return EventKind::Content;
        }
        let Ok(Value::Object(object)) = serde_json::from_str::<Value>(data) else {
            return EventKind::Content;
        };
        if object.contains_key("error") {
            if let Some(provider) = ProviderError::parse(data.as_bytes()) {
                return error(Some(provider));
            }
        }
        match object.get("type").and_then(Value::as_str) {
            Some("error") => return error(stream_error::error_fields(&object)),
            Some("response.failed") => {
                return error(stream_error::failed_response_error(&object));
            }
            Some(kind) if self.non_content.contains(kind) => return EventKind::NonContent,
            _ => {}
        }
        if chunk::is_chunk(&object) && !chunk::has_output(&object) {
            return EventKind::NonContent;
        }
        EventKind::Content
    }
}

/// An error event: its data is read unless it is over [`MAX_PARSED`].
fn error_event(data: &str) -> EventKind {
    let provider = if data.len() <= MAX_PARSED {
        stream_error::provider_error(data)
    } else {
        None
    };
    error(provider)
}

fn error(provider: Option<ProviderError>) -> EventKind {
    EventKind::Error {
        class: super::classify_stream_error(provider.as_ref()),
        provider,
    }
}

#[cfg(test)]
#[path = "first_event_tests.rs"]
mod tests;
