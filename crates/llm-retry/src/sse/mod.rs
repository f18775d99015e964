//! Just enough server-sent events to read a stream's first events.
//!
//! A streamed LLM response (`text/event-stream`) can fail before its first
//! token while still answering `200`: Anthropic's first event may be
//! `event: error` with `overloaded_error`; OpenAI's Responses API sends an
//! in-band `{"type":"error",…}` or `response.failed`; Chat Completions sends
//! `data: {"error":{…}}`; a stream may say `[DONE]` or end before any
//! content. The stream guard holds such a response back and reads its first
//! events with two pure pieces (no I/O, no runtime):
//!
//! - [`SseDecoder`]: incremental, bounded WHATWG event-stream framing. Bytes
//!   in, split anywhere; [`SseEvent`]s out.
//! - [`EventRules`]: what one event means before any content
//!   ([`EventKind`]): content, non-content (pings, envelopes), an error
//!   (classified by [`classify_stream_error`], the HTTP decision table
//!   applied to the error's type or code), or `[DONE]`.

// Crate-private: `pub` here marks what `crate::fuzzing` re-exports for the
// fuzz targets under `--cfg fuzzing`; no other build can reach it.
#![cfg_attr(not(fuzzing), allow(unreachable_pub))]

mod chunk;
mod decoder;
mod event;
mod fields;
mod first_event;
#[cfg(test)]
mod property_tests;
mod stream_error;
#[cfg(test)]
mod stream_tests;

pub use decoder::SseDecoder;
pub use event::{SseError, SseEvent};
pub use first_event::{EventKind, EventRules};
pub use stream_error::classify_stream_error;

#[cfg(test)]
mod doc_examples {
    //! The examples this module's documentation carried while it was public.
    #![allow(clippy::unwrap_used)]

    #[test]
    fn example_1() -> Result<(), crate::BoxError> {
        use crate::classify::{Classification, RetryableKind};
        use crate::sse::{EventKind, EventRules, SseDecoder};

        let mut decoder = SseDecoder::new(64 * 1024);
        let rules = EventRules::default();
        // Anthropic: the envelope, then an overload before any text.
        decoder.feed(b"event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: er")?;
        decoder.feed(
            b"ror\r\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\r\n\r\n",
        )?;

        let first = decoder.next_event().expect("message_start");
        assert_eq!(rules.classify(&first), EventKind::NonContent);
        let second = decoder.next_event().expect("error");
        assert!(matches!(
            rules.classify(&second),
            EventKind::Error {
                class: Classification::Retryable(RetryableKind::Overloaded),
                ..
            }
        ));
        assert_eq!(decoder.next_event(), None);
        Ok(())
    }
}
