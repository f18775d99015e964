//! [`SseDecoder`]: incremental framing of a `text/event-stream` body.

use super::fields::{reserve_bounded, EventBuilder};
use super::{SseError, SseEvent};
use std::collections::VecDeque;

/// The UTF-8 byte order mark, skipped once at the very start of a stream.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// An incremental, bounded, WHATWG-style event-stream parser.
///
/// Feed it the body's chunks as they arrive, split anywhere (inside a line
/// ending or a UTF-8 character); take complete events with
/// [`next_event`](SseDecoder::next_event), in order.
///
/// - Lines end with `\n`, `\r\n` or `\r`; a `\r` ending one chunk and a `\n`
///   starting the next are one line ending.
/// - A blank line dispatches the event, if it carried a `data` line. An
///   event without `data` (a comment-only block, or `event: error` alone) is
///   not dispatched, per the spec.
/// - One leading UTF-8 BOM is skipped. Lines are decoded as UTF-8 once
///   complete; invalid sequences become U+FFFD.
///
/// # Memory
///
/// At most `max_buffered` bytes of the *incomplete* event are held: the
/// partial line (field name included) plus the fields read since the last
/// blank line ([`buffered_len`](SseDecoder::buffered_len)). Complete events
/// wait in a queue that this limit does not count: take them after every
/// [`feed`](SseDecoder::feed) (they come from that chunk, so they are
/// about its size). Never panics, whatever the input.
#[derive(Debug)]
pub struct SseDecoder {
    max_buffered: usize,
    /// The current line so far, raw, without its ending.
    line: Vec<u8>,
    /// The fields read since the last dispatch.
    fields: EventBuilder,
    queue: VecDeque<SseEvent>,
    /// BOM bytes matched at the start of the stream; `None` once decided.
    bom: Option<usize>,
    /// The last byte was a `\r` ending a line: a `\n` next belongs to it.
    after_cr: bool,
    failed: bool,
    consumed: u64,
}

impl SseDecoder {
    /// A decoder holding at most `max_buffered` bytes of an incomplete event.
    pub fn new(max_buffered: usize) -> SseDecoder {
        SseDecoder {
            max_buffered,
            line: Vec::new(),
            fields: EventBuilder::default(),
            queue: VecDeque::new(),
            bom: Some(0),
            after_cr: false,
            failed: false,
            consumed: 0,
        }
    }

    /// Reads the next chunk of the stream.
    ///
    /// Fails with [`SseError::TooLarge`] as soon as the incomplete event
    /// would exceed `max_buffered` bytes. The decoder then drops that event,
    /// holds nothing more, and fails every later `feed`; events completed
    /// before the overflow can still be taken.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), SseError> {
        self.consumed = self.consumed.saturating_add(chunk.len() as u64);
        if self.failed {
            return Err(SseError::TooLarge {
                limit: self.max_buffered,
            });
        }
        let result = self.read(chunk);
        if result.is_err() {
            self.failed = true;
            self.line = Vec::new();
            self.fields = EventBuilder::default();
        }
        result
    }

    /// The oldest complete event not yet taken.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        self.queue.pop_front()
    }

    /// Ends the stream, then returns the oldest complete event not yet taken.
    ///
    /// Per the spec, an event not ended by a blank line (the stream stopped
    /// mid-line, or after `data: …\n` with no blank line) is discarded: it
    /// is never returned, by `finish` or later. Call it until it returns
    /// `None` to drain the queue. Input fed afterwards starts a fresh line.
    #[cfg(any(test, fuzzing))]
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.line.clear();
        self.fields = EventBuilder::default();
        self.after_cr = false;
        self.bom = None;
        self.next_event()
    }

    /// Total bytes passed to [`feed`](SseDecoder::feed), including any
    /// refused after a failure.
    #[cfg(any(test, fuzzing))]
    pub fn bytes_consumed(&self) -> u64 {
        self.consumed
    }

    /// Bytes of the incomplete event held now; never more than `max_buffered`.
    pub fn buffered_len(&self) -> usize {
        self.line.len() + self.fields.len()
    }

    /// Whether an incomplete event or line is held: a stream that ends now
    /// ends mid-event.
    #[cfg(any(test, fuzzing))]
    pub fn is_mid_event(&self) -> bool {
        !self.line.is_empty() || !self.fields.is_empty()
    }

    fn read(&mut self, chunk: &[u8]) -> Result<(), SseError> {
        let mut rest = self.skip_bom(chunk)?;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            rest = rest.strip_prefix(b"\n").unwrap_or(rest);
        }
        while let Some(at) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.extend_line(&rest[..at])?;
            let ending = rest[at];
            rest = &rest[at + 1..];
            if ending == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            self.end_line()?;
        }
        self.extend_line(rest)
    }

    /// Consumes the BOM bytes at the start of the stream, even split across
    /// chunks; a partial match that fails is ordinary line content.
    fn skip_bom<'a>(&mut self, mut chunk: &'a [u8]) -> Result<&'a [u8], SseError> {
        while let (Some(matched), Some((&first, rest))) = (self.bom, chunk.split_first()) {
            if first == BOM[matched] {
                chunk = rest;
                self.bom = Some(matched + 1).filter(|&m| m < BOM.len());
            } else {
                self.bom = None;
                self.extend_line(&BOM[..matched])?;
            }
        }
        Ok(chunk)
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if bytes.is_empty() {
            return Ok(());
        }
        if self.buffered_len().saturating_add(bytes.len()) > self.max_buffered {
            return Err(SseError::TooLarge {
                limit: self.max_buffered,
            });
        }
        let room = self.max_buffered - self.fields.len();
        let (len, capacity) = (self.line.len(), self.line.capacity());
        if let Some(more) = reserve_bounded(len, capacity, bytes.len(), room) {
            self.line.reserve_exact(more);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn end_line(&mut self) -> Result<(), SseError> {
        if self.line.is_empty() {
            self.queue.extend(self.fields.dispatch());
            return Ok(());
        }
        let result = self.fields.apply(&self.line, self.max_buffered);
        self.line.clear();
        result
    }
}

#[cfg(test)]
#[path = "decoder_tests.rs"]
mod tests;
