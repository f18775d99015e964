//! What the decoder produces: [`SseEvent`], and how it fails: [`SseError`].

use std::error::Error;
use std::fmt;

/// One dispatched server-sent event.
///
/// Only events that carried at least one `data` line are dispatched (see
/// [`SseDecoder`](super::SseDecoder)), so `data` is always what the server
/// sent, possibly the empty string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event` field, when one with a non-empty value was sent (the
    /// last one wins). `None` is what browsers call a `message` event.
    pub event: Option<String>,
    /// The `data` lines, joined with `"\n"`.
    pub data: String,
    /// The `id` field sent within this event (the last one wins; one that
    /// contains NUL is ignored). Unlike a browser's `lastEventId`, it does
    /// not carry over to later events.
    pub id: Option<String>,
}

impl SseEvent {
    /// The event's name: the `event` field, or `"message"` when none was sent.
    #[cfg(any(test, fuzzing))]
    pub fn name(&self) -> &str {
        self.event.as_deref().unwrap_or("message")
    }
}

/// Why the decoder stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SseError {
    /// An incomplete event would have exceeded `limit` buffered bytes. The
    /// decoder dropped it and refuses further input.
    TooLarge {
        /// The decoder's `max_buffered`.
        limit: usize,
    },
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::TooLarge { limit } => write!(
                f,
                "event stream: an incomplete event exceeded the {limit}-byte buffer limit"
            ),
        }
    }
}

impl Error for SseError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_defaults_to_message() {
        let mut event = SseEvent {
            event: None,
            data: String::new(),
            id: None,
        };
        assert_eq!(event.name(), "message");
        event.event = Some("ping".to_owned());
        assert_eq!(event.name(), "ping");
    }

    #[test]
    fn too_large_display() {
        let err = SseError::TooLarge { limit: 65536 };
        assert_eq!(
            err.to_string(),
            "event stream: an incomplete event exceeded the 65536-byte buffer limit"
        );
    }
}
