//! The event under construction: applies one complete line at a time.
//!
//! Per the WHATWG event-stream rules: a line starting with `:` is a comment;
//! `name:value` drops one leading space from the value; a line without `:`
//! is a field with an empty value. `event`, `data` and `id` (ignored when it
//! contains NUL) are kept; `retry` and unknown fields are ignored.

use super::{SseError, SseEvent};
use std::borrow::Cow;

/// The fields read since the last dispatch.
#[derive(Debug, Default)]
pub(super) struct EventBuilder {
    event: String,
    data: String,
    /// Whether a `data` line was read: `data:` alone still dispatches.
    has_data: bool,
    id: Option<String>,
}

impl EventBuilder {
    /// Bytes held by the fields.
    pub(super) fn len(&self) -> usize {
        self.event.len() + self.data.len() + self.id.as_ref().map_or(0, String::len)
    }

    /// Whether any field was read since the last dispatch.
    #[cfg(any(test, fuzzing))]
    pub(super) fn is_empty(&self) -> bool {
        !self.has_data && self.event.is_empty() && self.id.is_none()
    }

    /// Applies one complete, non-empty line (without its line ending).
    ///
    /// Fails, changing nothing, when the fields would then hold more than
    /// `limit` bytes (lossy decoding can make a field longer than its line).
    pub(super) fn apply(&mut self, line: &[u8], limit: usize) -> Result<(), SseError> {
        if line.first() == Some(&b':') {
            return Ok(());
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        let too_large = Err(SseError::TooLarge { limit });
        match name {
            b"data" => {
                let value = String::from_utf8_lossy(value);
                let separator = usize::from(self.has_data);
                if self.len() + separator + value.len() > limit {
                    return too_large;
                }
                let extra = separator + value.len();
                let room = limit - (self.len() - self.data.len());
                if let Some(more) =
                    reserve_bounded(self.data.len(), self.data.capacity(), extra, room)
                {
                    self.data.reserve_exact(more);
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            b"event" => {
                let value = String::from_utf8_lossy(value);
                if self.len() - self.event.len() + value.len() > limit {
                    return too_large;
                }
                self.event.clear();
                self.event.push_str(&value);
            }
            b"id" if !value.contains(&0) => {
                let value = String::from_utf8_lossy(value);
                let held = self.id.as_ref().map_or(0, String::len);
                if self.len() - held + value.len() > limit {
                    return too_large;
                }
                self.id = Some(Cow::into_owned(value));
            }
            // `retry`, an `id` with NUL, and unknown fields.
            _ => {}
        }
        Ok(())
    }

    /// Ends the event at a blank line: the event, if it carried data, and a
    /// fresh builder either way (an event without `data` is not dispatched).
    pub(super) fn dispatch(&mut self) -> Option<SseEvent> {
        let EventBuilder {
            event,
            data,
            has_data,
            id,
        } = std::mem::take(self);
        has_data.then(|| SseEvent {
            event: (!event.is_empty()).then_some(event),
            data,
            id,
        })
    }
}

/// How much to reserve so that `extra` more bytes fit in a buffer of `len`
/// bytes and `capacity`: `None` when they already fit. Grows by doubling,
/// like `Vec`, but never past `limit` (unless `len + extra` itself is past it).
pub(super) fn reserve_bounded(
    len: usize,
    capacity: usize,
    extra: usize,
    limit: usize,
) -> Option<usize> {
    let needed = len.saturating_add(extra);
    (needed > capacity).then(|| needed.max(capacity.saturating_mul(2).min(limit)) - len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str, id: Option<&str>) -> Option<SseEvent> {
        Some(SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
            id: id.map(str::to_owned),
        })
    }

    fn build(lines: &[&[u8]]) -> Option<SseEvent> {
        let mut builder = EventBuilder::default();
        for line in lines {
            assert_eq!(builder.apply(line, usize::MAX), Ok(()));
        }
        builder.dispatch()
    }

    #[test]
    fn field_table() {
        let cases: &[(&[&[u8]], Option<SseEvent>)] = &[
            (&[b"data: x"], ev(None, "x", None)),
            (&[b"data:x"], ev(None, "x", None)),
            (&[b"data:  x"], ev(None, " x", None)),
            (&[b"data: x "], ev(None, "x ", None)),
            (&[b"data: a:b: c"], ev(None, "a:b: c", None)),
            (&[b"data"], ev(None, "", None)),
            (&[b"data:"], ev(None, "", None)),
            (&[b"data", b"data"], ev(None, "\n", None)),
            (&[b"data: a", b"data: b", b"data"], ev(None, "a\nb\n", None)),
            (&[b"event: ping", b"data: {}"], ev(Some("ping"), "{}", None)),
            (
                &[b"event: a", b"event: b", b"data: x"],
                ev(Some("b"), "x", None),
            ),
            (&[b"event: a", b"event:", b"data: x"], ev(None, "x", None)),
            (&[b"event:error"], None),
            (&[b"event: error", b"id: 1"], None),
            (&[b"id: 7", b"data: x"], ev(None, "x", Some("7"))),
            (&[b"id", b"data: x"], ev(None, "x", Some(""))),
            (
                &[b"id: 7", b"id: a\0b", b"data: x"],
                ev(None, "x", Some("7")),
            ),
            (&[b"retry: 1000", b"data: x"], ev(None, "x", None)),
            (&[b"Data: x"], None),
            (&[b"data : x"], None),
            (&[b" data: x"], None),
            (&[b"foo: bar", b"data: x"], ev(None, "x", None)),
            (&[b": comment"], None),
            (&[b":", b"data: x", b": data: y"], ev(None, "x", None)),
            (
                &[b"data: caf\xc3\xa9 \xe2\x82\xac"],
                ev(None, "café €", None),
            ),
            (&[b"data: \xff\xc3"], ev(None, "\u{fffd}\u{fffd}", None)),
            (&[b"event: \xffx", b"data"], ev(Some("\u{fffd}x"), "", None)),
        ];
        for (lines, want) in cases {
            assert_eq!(&build(lines), want, "{lines:?}");
        }
    }

    #[test]
    fn dispatch_resets_every_field() {
        let mut builder = EventBuilder::default();
        for line in [&b"event: e"[..], b"id: 1", b"data: x"] {
            assert_eq!(builder.apply(line, usize::MAX), Ok(()));
        }
        assert!(!builder.is_empty());
        assert_eq!(builder.dispatch(), ev(Some("e"), "x", Some("1")));
        assert!(builder.is_empty());
        assert_eq!(builder.len(), 0);
        assert_eq!(builder.dispatch(), None);
    }

    #[test]
    fn growth_is_bounded() {
        // (len, capacity, extra, limit, reserve)
        let cases = [
            (0, 0, 0, 10, None),
            (3, 8, 5, 100, None),
            (3, 8, 6, 100, Some(13)),
            (3, 8, 6, 12, Some(9)),
            (3, 8, 6, 9, Some(6)),
            (0, 0, 7, 100, Some(7)),
            (usize::MAX, usize::MAX, 1, usize::MAX, None),
        ];
        for (len, capacity, extra, limit, want) in cases {
            assert_eq!(reserve_bounded(len, capacity, extra, limit), want);
        }
    }

    #[test]
    fn limit_counts_every_field() {
        let too_large = Err(SseError::TooLarge { limit: 6 });
        let mut builder = EventBuilder::default();
        assert_eq!(builder.apply(b"event: ab", 6), Ok(()));
        assert_eq!(builder.apply(b"id: cd", 6), Ok(()));
        assert_eq!(builder.apply(b"data: e", 6), Ok(()));
        assert_eq!(builder.len(), 5);
        // "e" + "\n" + "f" would make 7.
        assert_eq!(builder.apply(b"data: f", 6), too_large);
        assert_eq!(builder.apply(b"id: cdef", 6), too_large);
        assert_eq!(builder.apply(b"id: x", 6), Ok(()));
        // Lossy decoding grows one invalid byte into three.
        assert_eq!(builder.apply(b"event: \xff\xff", 6), too_large);
        assert_eq!(builder.apply(b"event: abc", 6), Ok(()));
        assert_eq!(builder.len(), 5);
        assert_eq!(builder.dispatch(), ev(Some("abc"), "e", Some("x")));
    }
}
