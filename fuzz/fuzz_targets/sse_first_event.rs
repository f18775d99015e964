//! Feeds an event stream to `SseDecoder` in two parts and classifies every
//! event with the default `EventRules`, as the stream guard does.
//!
//! Input: two bytes (little-endian) choosing the split point, then the
//! stream. Checks: nothing panics; the decoder never holds more than its
//! cap; a split decodes exactly like one feed; a small cap only ever cuts
//! the stream short (the events it yields are a prefix of the full ones).

#![no_main]

use libfuzzer_sys::fuzz_target;
use llm_retry::fuzzing::{classify_event, SseDecoder, SseEvent};
use llm_retry::stream_guard::EventRules;

const CAP: usize = 64 * 1024;

/// Feeds `parts` in order, checking the cap after each; the events, and
/// whether the decoder refused input.
fn decode(parts: &[&[u8]], cap: usize) -> (Vec<SseEvent>, bool) {
    let mut decoder = SseDecoder::new(cap);
    let mut events = Vec::new();
    let mut failed = false;
    for part in parts {
        failed |= decoder.feed(part).is_err();
        assert!(decoder.buffered_len() <= cap);
        events.extend(std::iter::from_fn(|| decoder.next_event()));
    }
    events.extend(std::iter::from_fn(|| decoder.finish()));
    let fed: usize = parts.iter().map(|p| p.len()).sum();
    assert_eq!(decoder.bytes_consumed(), fed as u64);
    (events, failed)
}

fuzz_target!(|input: &[u8]| {
    let Some((head, stream)) = input.split_first_chunk::<2>() else {
        return;
    };
    let at = usize::from(u16::from_le_bytes(*head)) % (stream.len() + 1);
    let (a, b) = stream.split_at(at);

    let (events, failed) = decode(&[a, b], CAP);
    let rules = EventRules::default();
    for event in &events {
        let _ = classify_event(&rules, event);
    }

    let (whole, whole_failed) = decode(&[stream], CAP);
    assert_eq!(failed, whole_failed);
    if !failed {
        assert_eq!(events, whole);
    }

    // A cap from the first byte: overflow paths, at every size.
    let small = usize::from(head[0]);
    let (cut, _) = decode(&[a, b], small);
    if !whole_failed {
        assert!(cut.len() <= whole.len() && cut[..] == whole[..cut.len()]);
    }
});
