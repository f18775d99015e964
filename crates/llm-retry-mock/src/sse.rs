//! Server-Sent-Events framing for streamed replies: [`SseEvent`].
//!
//! An [`SseEvent`] is serialised once, when it is built, so that
//! [`Reply::expected_body`](crate::Reply::expected_body) can return exactly
//! the bytes that go on the wire.

use std::time::Duration;

use bytes::Bytes;

/// One event of a `text/event-stream` body, sent as its own body chunk.
///
/// ```
/// use std::time::Duration;
/// use llm_retry_mock::SseEvent;
///
/// let ev = SseEvent::new(Some("ping"), "a\nb").after(Duration::from_millis(10));
/// assert_eq!(&ev.bytes()[..], b"event: ping\ndata: a\ndata: b\n\n");
/// assert_eq!(ev.delay(), Duration::from_millis(10));
/// ```
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub(crate) bytes: Bytes,
    pub(crate) delay: Duration,
}

impl SseEvent {
    /// An event with an optional `event:` name and a `data:` payload.
    ///
    /// Serialises to `event: NAME\ndata: LINE\n…\n\n`. Every line of `data`
    /// (split on `\n`, `\r\n` or `\r`) becomes its own `data:` line, so a
    /// conforming parser reassembles `data` exactly. Line breaks inside
    /// `event` cannot be represented and are removed.
    pub fn new(event: Option<&str>, data: &str) -> SseEvent {
        let mut out = String::with_capacity(data.len() + 32);
        if let Some(name) = event {
            out.push_str("event: ");
            out.extend(name.chars().filter(|c| *c != '\n' && *c != '\r'));
            out.push('\n');
        }
        for line in split_lines(data) {
            out.push_str("data: ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
        SseEvent {
            bytes: Bytes::from(out),
            delay: Duration::ZERO,
        }
    }

    /// An event whose `data:` is `value` serialised as compact JSON.
    pub fn json(event: Option<&str>, value: &serde_json::Value) -> SseEvent {
        SseEvent::new(event, &value.to_string())
    }

    /// Bytes sent verbatim as one chunk: comments (`": keep-alive\n\n"`),
    /// malformed framing, invalid UTF-8, half an event…
    pub fn raw(bytes: impl Into<Bytes>) -> SseEvent {
        SseEvent {
            bytes: bytes.into(),
            delay: Duration::ZERO,
        }
    }

    /// Waits `delay` (on the tokio clock) before this event is sent.
    ///
    /// Calling it again replaces the previous delay.
    pub fn after(mut self, delay: Duration) -> SseEvent {
        self.delay = delay;
        self
    }

    /// The exact bytes this event puts on the wire.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The wait before this event is sent.
    pub fn delay(&self) -> Duration {
        self.delay
    }
}

/// Splits on `\r\n`, `\n` or `\r`, like an SSE parser does. Always yields at
/// least one (possibly empty) line.
fn split_lines(data: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let s = rest?;
        match s.find(['\r', '\n']) {
            None => {
                rest = None;
                Some(s)
            }
            Some(i) => {
                let skip = if s[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = Some(&s[i + skip..]);
                Some(&s[..i])
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing() {
        let cases: &[(Option<&str>, &str, &str)] = &[
            (None, "x", "data: x\n\n"),
            (Some("e"), "", "event: e\ndata: \n\n"),
            (
                Some("e\r\nvil"),
                "a\r\nb\rc\nd",
                "event: evil\ndata: a\ndata: b\ndata: c\ndata: d\n\n",
            ),
            (None, "a\n", "data: a\ndata: \n\n"),
        ];
        for (event, data, want) in cases {
            let got = SseEvent::new(*event, data);
            assert_eq!(&got.bytes()[..], want.as_bytes(), "{event:?} {data:?}");
        }
    }

    #[test]
    fn raw_is_verbatim() {
        let ev = SseEvent::raw(&b"\xff: x"[..]);
        assert_eq!(&ev.bytes()[..], b"\xff: x");
        assert_eq!(ev.delay(), Duration::ZERO);
    }
}
