//! Property tests: any chunking decodes like one feed; no input panics or
//! is buffered past the cap.

use super::{EventRules, SseDecoder, SseEvent};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

/// Field values: ASCII, `:`, spaces, multi-byte characters; no line breaks.
fn value() -> impl Strategy<Value = String> {
    "[a-z0-9 :{}\"é€😀\u{feff}]{0,12}"
}

/// `(event, data lines, id)`: at least one data line, so it is dispatched.
fn event() -> impl Strategy<Value = (Option<String>, Vec<String>, Option<String>)> {
    (
        proptest::option::of("[a-z][a-z_.]{0,10}"),
        proptest::collection::vec(value(), 1..4),
        proptest::option::of(value()),
    )
}

/// Serialises events with the given line endings (cycled) and comments.
fn serialise(
    events: &[(Option<String>, Vec<String>, Option<String>)],
    endings: &[u8],
    bom: bool,
) -> Vec<u8> {
    let mut lines: Vec<String> = Vec::new();
    for (i, (name, data, id)) in events.iter().enumerate() {
        if i % 2 == 1 {
            lines.push(": comment".to_owned());
        }
        if let Some(name) = name {
            lines.push(format!("event: {name}"));
        }
        if let Some(id) = id {
            lines.push(format!("id: {id}"));
        }
        for line in data {
            // Without the space only when the value does not start with one.
            let sep = if line.starts_with(' ') || i % 3 != 0 {
                ": "
            } else {
                ":"
            };
            lines.push(format!("data{sep}{line}"));
        }
        lines.push(String::new());
    }
    let mut out = if bom {
        "\u{feff}".as_bytes().to_vec()
    } else {
        Vec::new()
    };
    let mut last = "";
    for (i, line) in lines.iter().enumerate() {
        out.extend_from_slice(line.as_bytes());
        let mut ending = ["\n", "\r\n", "\r"][usize::from(endings[i % endings.len()] % 3)];
        // "\r" then "\n" would be one ending: write "\r\n" instead.
        if last == "\r" && ending == "\n" && line.is_empty() {
            ending = "\r\n";
        }
        out.extend_from_slice(ending.as_bytes());
        last = ending;
    }
    out
}

/// Feeds `input` cut at `cuts` (taken modulo its length); drains after each feed.
fn decode(input: &[u8], cuts: &[usize], cap: usize) -> (Vec<SseEvent>, bool) {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    points.sort_unstable();
    let mut decoder = SseDecoder::new(cap);
    let mut events = Vec::new();
    let mut failed = false;
    let mut start = 0;
    for end in points.into_iter().chain([input.len()]) {
        failed |= decoder.feed(&input[start..end]).is_err();
        assert!(
            decoder.buffered_len() <= cap,
            "{} > {cap}",
            decoder.buffered_len()
        );
        events.extend(std::iter::from_fn(|| decoder.next_event()));
        start = end;
    }
    assert_eq!(decoder.bytes_consumed(), input.len() as u64);
    events.extend(std::iter::from_fn(|| decoder.finish()));
    (events, failed)
}

/// Bytes rich in the framing's special cases.
fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b":".to_vec()),
        Just(b" ".to_vec()),
        Just(b"data".to_vec()),
        Just(b"event".to_vec()),
        Just(b"id".to_vec()),
        Just(b"\0".to_vec()),
        Just(b"\xEF\xBB\xBF".to_vec()),
        Just("é😀".as_bytes().to_vec()),
        Just(b"[DONE]".to_vec()),
        Just(br#"{"error":{"type":"overloaded_error"}}"#.to_vec()),
        Just(br#"{"type":"error","code":"server_error"}"#.to_vec()),
        Just(
            br#"{"object":"chat.completion.chunk","choices":[{"delta":{"role":"assistant"}}]}"#
                .to_vec()
        ),
        proptest::collection::vec(any::<u8>(), 0..8),
    ];
    proptest::collection::vec(token, 0..40).prop_map(|t| t.concat())
}

proptest! {
    // Failing cases are saved next to this file, as `property_tests.regressions`.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn events_survive_any_chunking(
        events in proptest::collection::vec(event(), 0..6),
        endings in proptest::collection::vec(any::<u8>(), 1..8),
        bom in any::<bool>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        let input = serialise(&events, &endings, bom);
        let want: Vec<SseEvent> = events
            .iter()
            .map(|(name, data, id)| SseEvent {
                event: name.clone(),
                data: data.join("\n"),
                id: id.clone(),
            })
            .collect();
        let (got, failed) = decode(&input, &cuts, 64 * 1024);
        prop_assert!(!failed);
        prop_assert_eq!(got, want);
    }

    #[test]
    fn any_bytes_any_chunking(
        input in prop_oneof![stream_bytes(), any::<Vec<u8>>()],
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
        cap in prop_oneof![0usize..64, Just(64 * 1024)],
    ) {
        let (events, failed) = decode(&input, &cuts, cap);
        let rules = EventRules::default();
        for event in &events {
            let _ = rules.classify(event);
        }
        // With room to spare, any chunking decodes like one feed.
        let (whole, whole_failed) = decode(&input, &[], 64 * 1024);
        prop_assert!(!whole_failed);
        if !failed {
            prop_assert_eq!(events, whole);
        }
    }
}
