//! Framing tests: line endings, chunk splits, BOM, UTF-8, the buffer cap.

#![allow(clippy::unwrap_used)]

use super::*;

const CAP: usize = 64 * 1024;

fn ev(event: Option<&str>, data: &str, id: Option<&str>) -> SseEvent {
    SseEvent {
        event: event.map(str::to_owned),
        data: data.to_owned(),
        id: id.map(str::to_owned),
    }
}

fn data(data: &str) -> SseEvent {
    ev(None, data, None)
}

/// Feeds `chunks` in order, then drains the queue (without `finish`).
fn decode(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::new(CAP);
    for chunk in chunks {
        decoder.feed(chunk).unwrap();
    }
    std::iter::from_fn(|| decoder.next_event()).collect()
}

/// Anthropic-like, every line ending, a comment, multi-line data, UTF-8.
const STREAM: &[u8] = b"\xEF\xBB\xBFevent: message_start\r\ndata: {\"a\":1}\r\n\r\n: keep-alive\n\n\
event: ping\rdata: {\"type\": \"ping\"}\r\rid: 7\ndata: caf\xC3\xA9\ndata:\xF0\x9F\x98\x80 \xE2\x82\xAC\n\n\
data: [DONE]\r\n\r\ndata: cut";

fn stream_events() -> Vec<SseEvent> {
    vec![
        ev(Some("message_start"), "{\"a\":1}", None),
        ev(Some("ping"), "{\"type\": \"ping\"}", None),
        ev(None, "café\n😀 €", Some("7")),
        data("[DONE]"),
    ]
}

#[test]
fn every_line_ending() {
    for ending in ["\n", "\r\n", "\r"] {
        let text = ["event: e", "data: a", "", "data: b", "data: c", "", ""].join(ending);
        let want = vec![ev(Some("e"), "a", None), data("b\nc")];
        assert_eq!(decode(&[text.as_bytes()]), want, "{ending:?}");
    }
    // Mixed within one event; "\n\r" is two line endings.
    assert_eq!(
        decode(&[b"data: a\r\ndata: b\rdata: c\n\r"]),
        [data("a\nb\nc")]
    );
}

#[test]
fn one_feed() {
    assert_eq!(decode(&[STREAM]), stream_events());
}

#[test]
fn every_two_way_split() {
    for at in 0..=STREAM.len() {
        let (a, b) = STREAM.split_at(at);
        assert_eq!(decode(&[a, b]), stream_events(), "split at {at}");
    }
}

#[test]
fn every_three_way_split() {
    let short: &[u8] = b"\xEF\xBB\xBFdata: \xC3\xA9\r\n\r\nevent: e\rdata\r\r";
    let want = [data("é"), ev(Some("e"), "", None)];
    assert_eq!(decode(&[short]), want);
    for i in 0..=short.len() {
        for j in i..=short.len() {
            let chunks = [&short[..i], &short[i..j], &short[j..]];
            assert_eq!(decode(&chunks), want, "split at {i}, {j}");
        }
    }
}

#[test]
fn byte_at_a_time() {
    let chunks: Vec<&[u8]> = STREAM.chunks(1).collect();
    assert_eq!(decode(&chunks), stream_events());
}

#[test]
fn cr_then_lf_across_chunks_is_one_ending() {
    let cases: &[(&[&[u8]], Vec<SseEvent>)] = &[
        // Were the "\n" a second line ending, "a" would be dispatched alone.
        (&[b"data: a\r", b"\ndata: b\r\n\r\n"], vec![data("a\nb")]),
        (&[b"data: a\r", b"", b"\ndata: b\n\n"], vec![data("a\nb")]),
        (&[b"data: a\r", b"data: b\r\r"], vec![data("a\nb")]),
        (&[b"data: a\r", b"\r"], vec![data("a")]),
        (&[b"data: a\r", b"\r", b"\n"], vec![data("a")]),
        (&[b"data: a\r\n\r", b"\n\n"], vec![data("a")]),
        (&[b"data: a\n", b"\n"], vec![data("a")]),
    ];
    for (chunks, want) in cases {
        assert_eq!(&decode(chunks), want, "{chunks:?}");
    }
}

#[test]
fn comments_and_empty_events_dispatch_nothing() {
    let cases: &[(&[u8], Vec<SseEvent>)] = &[
        (b": ping\n\n", vec![]),
        (b":\n:\n\n\n\n", vec![]),
        (b"event: error\n\n", vec![]),
        (
            b"event: error\nid: 1\nretry: 5\n\ndata: x\n\n",
            vec![data("x")],
        ),
        (
            b"event: error\ndata:\n\n",
            vec![ev(Some("error"), "", None)],
        ),
        (b": c\ndata: x\n: c\ndata: y\n\n", vec![data("x\ny")]),
    ];
    for (input, want) in cases {
        assert_eq!(
            &decode(&[input]),
            want,
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn bom_only_at_the_start() {
    let cases: &[(&[&[u8]], Vec<SseEvent>)] = &[
        (&[b"\xEF\xBB\xBFdata: x\n\n"], vec![data("x")]),
        (
            &[b"\xEF", b"\xBB", b"\xBF", b"data: x\n\n"],
            vec![data("x")],
        ),
        // A second BOM is part of the field name: an unknown field.
        (
            &[b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\ndata: y\n\n"],
            vec![data("y")],
        ),
        // A partial BOM is ordinary content.
        (&[b"\xEF\xBB", b"data: x\n\ndata: y\n\n"], vec![data("y")]),
        (&[b"\xEF\xBB\n", b"data: x\n\n"], vec![data("x")]),
        (&[b"data: x\n\n\xEF\xBB\xBFdata: y\n\n"], vec![data("x")]),
        (&[b"data: \xEF\xBB\xBFx\n\n"], vec![data("\u{feff}x")]),
    ];
    for (chunks, want) in cases {
        assert_eq!(&decode(chunks), want, "{chunks:?}");
    }
}

#[test]
fn utf8_split_inside_a_character() {
    let text = "data: é€😀\n\n".as_bytes();
    for at in 0..=text.len() {
        let (a, b) = text.split_at(at);
        assert_eq!(decode(&[a, b]), [data("é€😀")], "split at {at}");
    }
    // Invalid or truncated sequences become U+FFFD; a line ending ends them.
    assert_eq!(decode(&[b"data: \xF0\x9F\n\n"]), [data("\u{fffd}")]);
    assert_eq!(decode(&[b"data: a\xFFb\n\n"]), [data("a\u{fffd}b")]);
}

#[test]
fn finish_discards_the_unterminated_event() {
    let mut decoder = SseDecoder::new(CAP);
    decoder
        .feed(b"data: a\n\ndata: b\n\nevent: error\ndata: {}\n")
        .unwrap();
    assert!(decoder.is_mid_event());
    assert_eq!(decoder.finish(), Some(data("a")));
    assert!(!decoder.is_mid_event());
    assert_eq!(decoder.finish(), Some(data("b")));
    assert_eq!(decoder.finish(), None);
    assert_eq!(decoder.next_event(), None);
    assert_eq!(decoder.buffered_len(), 0);
    // Input after `finish` starts a fresh line.
    decoder.feed(b"\ndata: c\n\n").unwrap();
    assert_eq!(decoder.next_event(), Some(data("c")));

    let mut decoder = SseDecoder::new(CAP);
    decoder.feed(b"data: no blank line").unwrap();
    assert_eq!(decoder.finish(), None);
}

#[test]
fn bytes_consumed_counts_every_byte_fed() {
    let mut decoder = SseDecoder::new(8);
    decoder.feed(b"\xEF\xBB\xBFdata: x\r").unwrap();
    decoder.feed(b"").unwrap();
    decoder.feed(b"\n\n").unwrap();
    assert_eq!(decoder.bytes_consumed(), 13);
    assert!(decoder.feed(b"data: 123").is_err());
    assert!(decoder.feed(b"\n").is_err());
    assert_eq!(decoder.bytes_consumed(), 23);
}

#[test]
fn too_large_unterminated_line() {
    let too_large = Err(SseError::TooLarge { limit: CAP });
    let mut decoder = SseDecoder::new(CAP);
    decoder.feed(b"data: done\n\n").unwrap();
    decoder.feed(b"data: ").unwrap();
    let kib = [b'a'; 1024];
    let mut failed_at = None;
    for i in 0..100 {
        let fed = decoder.feed(&kib);
        assert!(decoder.buffered_len() <= CAP);
        assert!(decoder.line.capacity() <= CAP);
        if fed.is_err() {
            assert_eq!(fed, too_large);
            failed_at = failed_at.or(Some(i));
        }
    }
    // "data: " plus 63 KiB fit; the 64th KiB does not.
    assert_eq!(failed_at, Some(63));
    assert_eq!(decoder.buffered_len(), 0);
    assert_eq!(decoder.line.capacity(), 0);
    assert_eq!(decoder.feed(b"\n\ndata: x\n\n"), too_large);
    assert_eq!(decoder.next_event(), Some(data("done")));
    assert_eq!(decoder.next_event(), None);
}

#[test]
fn exactly_at_the_cap() {
    // A line of exactly CAP bytes, field name included, fits.
    let line = format!("data: {}", "a".repeat(CAP - 6));
    let mut decoder = SseDecoder::new(CAP);
    decoder.feed(line.as_bytes()).unwrap();
    assert_eq!(decoder.buffered_len(), CAP);
    decoder.feed(b"\n").unwrap();
    assert_eq!(decoder.buffered_len(), CAP - 6);
    decoder.feed(b"\n").unwrap();
    assert_eq!(decoder.buffered_len(), 0);
    assert_eq!(decoder.next_event().map(|e| e.data.len()), Some(CAP - 6));

    // One byte more does not.
    let mut decoder = SseDecoder::new(CAP);
    assert!(decoder.feed(format!("{line}a").as_bytes()).is_err());
}

#[test]
fn cap_counts_the_whole_incomplete_event() {
    let mut decoder = SseDecoder::new(16);
    decoder.feed(b"data: 12345\ndata: 6789\n").unwrap();
    // "12345\n6789" is held: 10 bytes; 6 more fit, 7 do not.
    assert_eq!(decoder.buffered_len(), 10);
    decoder.feed(b"data").unwrap();
    assert_eq!(decoder.buffered_len(), 14);
    assert!(decoder.feed(b": a").is_err());

    // Lossy decoding counts too: one invalid byte becomes three.
    let mut decoder = SseDecoder::new(8);
    decoder.feed(b"data:\xFF\xFF\xFF").unwrap();
    assert_eq!(decoder.feed(b"\n"), Err(SseError::TooLarge { limit: 8 }));

    // Complete events are queued apart from the cap.
    let mut decoder = SseDecoder::new(8);
    decoder.feed(b"data: a\n\ndata: b\n\ndata: c\n\n").unwrap();
    assert_eq!(decode_all(&mut decoder), [data("a"), data("b"), data("c")]);

    // A zero cap still reads blank lines.
    let mut decoder = SseDecoder::new(0);
    decoder.feed(b"\r\n\n\r").unwrap();
    assert!(decoder.feed(b"d").is_err());
}

fn decode_all(decoder: &mut SseDecoder) -> Vec<SseEvent> {
    std::iter::from_fn(|| decoder.next_event()).collect()
}
