#![allow(clippy::unwrap_used)]

use super::*;
use http_body_util::{BodyExt, Full, StreamBody};

fn chunked(parts: &[&'static str]) -> impl Body<Data = Bytes, Error = BoxError> {
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = parts
        .iter()
        .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
        .collect();
    StreamBody::new(futures_util::stream::iter(frames))
}

async fn collect<B>(body: B) -> Result<Bytes, BoxError>
where
    B: Body<Data = Bytes, Error = BoxError>,
{
    Ok(body.collect().await?.to_bytes())
}

#[tokio::test]
async fn full_body_replays_without_copying() {
    let original = Bytes::from_static(b"{\"model\":\"x\"}");
    let first = ReplayBody::new(Full::new(original.clone()), 1024);
    assert_eq!(first.size_hint().exact(), Some(original.len() as u64));
    let second = first.try_clone().unwrap();
    let sent = collect(first).await.unwrap();
    assert_eq!(sent, original);
    // The replay hands out the very same allocation.
    let replayed = collect(second).await.unwrap();
    assert_eq!(replayed.as_ptr(), original.as_ptr());
}

#[tokio::test]
async fn streamed_body_replays_byte_identical_with_exact_size() {
    let first = ReplayBody::new(chunked(&["ab", "cd", "ef"]), 1024);
    let second = first.try_clone().unwrap();
    assert_eq!(collect(first).await.unwrap(), "abcdef");
    assert_eq!(second.size_hint().exact(), Some(6));
    assert_eq!(collect(second).await.unwrap(), "abcdef");
}

#[tokio::test]
async fn replay_continues_where_an_early_stop_left_off() {
    let mut first = ReplayBody::new(chunked(&["ab", "cd", "ef"]), 1024);
    let second = first.try_clone().unwrap();
    let frame = first.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "ab");
    drop(first);
    assert_eq!(collect(second).await.unwrap(), "abcdef");
}

#[tokio::test]
async fn past_the_cap_the_send_completes_but_no_replay_is_offered() {
    let first = ReplayBody::new(chunked(&["abcd", "efgh", "ij"]), 6);
    let early_clone = first.try_clone().unwrap();
    assert_eq!(collect(first).await.unwrap(), "abcdefghij");
    assert!(early_clone.is_capped());
    assert!(early_clone.try_clone().is_none());
    let err = collect(early_clone).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "request body exceeds the 6-byte replay buffer"
    );
}

#[tokio::test]
async fn body_exactly_at_the_cap_is_replayable() {
    let first = ReplayBody::new(chunked(&["abc", "def"]), 6);
    let second = first.try_clone().unwrap();
    assert_eq!(collect(first).await.unwrap(), "abcdef");
    assert!(!second.is_capped());
    assert_eq!(second.cap(), 6);
    let debug = format!("{second:?}");
    assert!(
        debug.contains("ReplayBody") && debug.contains("buffered_bytes: 6"),
        "{debug}"
    );
    assert_eq!(collect(second).await.unwrap(), "abcdef");
}

#[tokio::test]
async fn a_failed_source_is_not_replayable() {
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = vec![
        Ok(Frame::data(Bytes::from_static(b"ab"))),
        Err("boom".into()),
    ];
    let first = ReplayBody::new(StreamBody::new(futures_util::stream::iter(frames)), 1024);
    let second = first.try_clone().unwrap();
    assert!(collect(first).await.is_err());
    assert!(second.try_clone().is_none());
    assert!(collect(second).await.is_err());
}

#[tokio::test]
async fn trailers_are_replayed_once_after_the_data() {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-checksum", http::HeaderValue::from_static("42"));
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = vec![
        Ok(Frame::data(Bytes::from_static(b"ab"))),
        Ok(Frame::trailers(trailers.clone())),
    ];
    let first = ReplayBody::new(StreamBody::new(futures_util::stream::iter(frames)), 1024);
    let second = first.try_clone().unwrap();
    let a = first.collect().await.unwrap();
    assert_eq!(a.trailers(), Some(&trailers));
    let b = second.collect().await.unwrap();
    assert_eq!(b.trailers(), Some(&trailers));
    assert_eq!(b.to_bytes(), "ab");
}

#[tokio::test]
async fn empty_body_is_end_of_stream_and_replayable() {
    let first = ReplayBody::new(http_body_util::Empty::<Bytes>::new(), 16);
    assert!(first.is_end_stream());
    let second = first.try_clone().unwrap();
    assert_eq!(collect(first).await.unwrap(), "");
    assert!(second.is_end_stream());
    assert_eq!(collect(second).await.unwrap(), "");
}

#[tokio::test]
async fn a_body_that_reports_its_end_is_complete_without_a_final_poll() {
    // hyper stops polling once `is_end_stream` is true; the buffer must
    // already know the body is whole (recoveries rewrite it).
    let mut first = ReplayBody::new(Full::new(Bytes::from_static(b"abc")), 16);
    assert!(first.buffered().is_none());
    let chunk = first.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(chunk, "abc");
    assert!(first.is_end_stream());
    assert_eq!(first.buffered().unwrap(), "abc");
}

/// A waker that counts its wakes.
struct CountingWaker(std::sync::atomic::AtomicUsize);

impl std::task::Wake for CountingWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_clone_waiting_at_the_live_edge_is_woken_when_another_pulls() {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};

    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
    let source = StreamBody::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    let mut a = ReplayBody::new(source, 1024);
    let mut b = a.try_clone().unwrap();
    let woken_a = Arc::new(CountingWaker(0.into()));
    let woken_b = Arc::new(CountingWaker(0.into()));
    let waker_a = Waker::from(Arc::clone(&woken_a));
    let waker_b = Waker::from(Arc::clone(&woken_b));
    // Both wait; the channel keeps only B's waker.
    assert!(Pin::new(&mut a)
        .poll_frame(&mut Context::from_waker(&waker_a))
        .is_pending());
    assert!(Pin::new(&mut b)
        .poll_frame(&mut Context::from_waker(&waker_b))
        .is_pending());
    tx.send(Ok(Frame::data(Bytes::from_static(b"x"))))
        .await
        .unwrap();
    assert_eq!(woken_b.0.load(Ordering::SeqCst), 1);
    let Poll::Ready(Some(Ok(_))) = Pin::new(&mut b).poll_frame(&mut Context::from_waker(&waker_b))
    else {
        panic!("B reads the chunk");
    };
    assert_eq!(
        woken_a.0.load(Ordering::SeqCst),
        1,
        "A is told the buffer moved on"
    );
    let Poll::Ready(Some(Ok(frame))) =
        Pin::new(&mut a).poll_frame(&mut Context::from_waker(&waker_a))
    else {
        panic!("A reads the same chunk from the buffer");
    };
    assert_eq!(frame.into_data().unwrap(), "x");
}

#[tokio::test]
async fn a_buffered_body_over_the_cap_is_still_replayed_without_a_copy() {
    let big = Bytes::from(vec![7u8; 64]);
    let first = ReplayBody::new(http_body_util::Full::new(big.clone()), 16);
    let early_clone = first.try_clone().unwrap();
    assert_eq!(collect(first).await.unwrap(), big);
    let again = early_clone
        .try_clone()
        .expect("a buffered body stays replayable");
    let replayed = collect(again).await.unwrap();
    assert_eq!(replayed, big);
    assert_eq!(
        replayed.as_ptr(),
        big.as_ptr(),
        "the same bytes, not a copy"
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;
    use std::task::{Context, Poll, Waker};

    fn owned_chunks(chunks: &[Vec<u8>]) -> impl Body<Data = Bytes, Error = BoxError> {
        let frames: Vec<Result<Frame<Bytes>, BoxError>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::from(c.clone()))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    /// Polls `body` to its end without ever waiting; every poll must be
    /// ready (the source always is), so the first send is never held back
    /// to buffer.
    fn read_at_once<B: Body<Data = Bytes> + Unpin>(mut body: B) -> (Vec<Bytes>, bool) {
        struct Noop;
        impl std::task::Wake for Noop {
            fn wake(self: std::sync::Arc<Self>) {}
        }
        let waker = Waker::from(std::sync::Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let mut got = Vec::new();
        loop {
            match std::pin::Pin::new(&mut body).poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        got.push(data);
                    }
                }
                Poll::Ready(Some(Err(_))) => return (got, false),
                Poll::Ready(None) => return (got, true),
                Poll::Pending => panic!("a ready source must never make a send wait"),
            }
        }
    }

    proptest! {
        /// For any chunking and a cap around the body's size: the first
        /// send yields the source's chunks as they come; every replay is
        /// byte-identical to it; past the cap no replay is offered at all.
        #[test]
        fn every_replay_is_the_original(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8),
            slack in -3i64..4,
            replays in 1usize..4,
        ) {
            let total: usize = chunks.iter().map(Vec::len).sum();
            let cap = usize::try_from((total as i64 + slack).max(0)).unwrap();
            let first = ReplayBody::new(owned_chunks(&chunks), cap);
            let template = first.replica();
            let (sent, complete) = read_at_once(first);
            prop_assert!(complete);
            let want: Vec<Bytes> = chunks.iter().filter(|c| !c.is_empty()).map(|c| Bytes::from(c.clone())).collect();
            let sent_nonempty: Vec<Bytes> = sent.into_iter().filter(|c| !c.is_empty()).collect();
            prop_assert_eq!(&sent_nonempty, &want, "the first send is the source, chunk for chunk");
            let original: Vec<u8> = chunks.concat();
            // A streamed source never says it ended before it is polled
            // past its last chunk, so the cap applies to all of it (a
            // buffered `Full` body is exempt: see the unit test above).
            if total <= cap {
                for _ in 0..replays {
                    let again = template.try_clone();
                    prop_assert!(again.is_some(), "{total} bytes under a {cap}-byte cap");
                    let (bytes, complete) = read_at_once(again.unwrap());
                    prop_assert!(complete);
                    prop_assert_eq!(bytes.concat(), original.clone());
                }
            } else {
                prop_assert!(template.try_clone().is_none(), "{total} bytes over a {cap}-byte cap");
                prop_assert!(template.is_capped());
            }
        }
    }
}

#[tokio::test]
async fn a_buffered_body_is_known_before_its_first_send_and_sent_whole() {
    let body = ReplayBody::new(Full::new(Bytes::from_static(b"{\"max_tokens\":5}")), 1024);
    let replica = body.replica();
    assert_eq!(
        replica.fill_ready().as_deref(),
        Some(&b"{\"max_tokens\":5}"[..])
    );
    assert_eq!(body.size_hint().exact(), Some(16));
    assert_eq!(&collect(body).await.unwrap()[..], b"{\"max_tokens\":5}");
    assert_eq!(
        &collect(replica.try_clone().unwrap()).await.unwrap()[..],
        b"{\"max_tokens\":5}"
    );
}

/// A body of known size whose one frame is not there until `ready` is set
/// (then it fails, when `fails`).
struct Later {
    ready: Arc<std::sync::atomic::AtomicBool>,
    fails: bool,
    done: bool,
}

impl Body for Later {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if !self.ready.load(std::sync::atomic::Ordering::SeqCst) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.done = true;
        Poll::Ready(Some(if self.fails {
            Err("the caller's stream broke".into())
        } else {
            Ok(Frame::data(Bytes::from_static(b"late")))
        }))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(4)
    }
}

fn later(fails: bool) -> (Later, Arc<std::sync::atomic::AtomicBool>) {
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let body = Later {
        ready: Arc::clone(&ready),
        fails,
        done: false,
    };
    (body, ready)
}

#[tokio::test]
async fn a_body_not_ready_or_over_the_cap_is_left_to_its_first_send() {
    // A body of known size whose chunk is not there yet: the early read
    // polls it once and leaves it.
    let (source, ready) = later(false);
    let body = ReplayBody::new(source, 1024);
    assert_eq!(body.replica().fill_ready(), None);
    ready.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(&collect(body).await.unwrap()[..], b"late");
    // A stream of unknown size is not polled early at all.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
    let stream = StreamBody::new(tokio_stream_from(rx));
    let body = ReplayBody::new(stream, 1024);
    assert_eq!(body.replica().fill_ready(), None);
    tx.send(Ok(Frame::data(Bytes::from_static(b"late"))))
        .await
        .unwrap();
    drop(tx);
    assert_eq!(&collect(body).await.unwrap()[..], b"late");
    // Over the cap: the first send streams it, as without the early read.
    let body = ReplayBody::new(Full::new(Bytes::from_static(b"0123456789")), 4);
    assert_eq!(body.replica().fill_ready(), None);
    assert_eq!(&collect(body).await.unwrap()[..], b"0123456789");
}

/// A stream of the frames sent on `rx`.
fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, BoxError>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn a_body_that_fails_when_read_early_gives_its_first_send_the_error() {
    let (source, ready) = later(true);
    ready.store(true, std::sync::atomic::Ordering::SeqCst);
    let body = ReplayBody::new(source, 1024);
    let replica = body.replica();
    assert_eq!(replica.fill_ready(), None);
    let first = collect(body).await.unwrap_err();
    assert_eq!(first.to_string(), "the caller's stream broke");
    // Later readers are told it failed before.
    let again = collect(replica).await.unwrap_err();
    assert_eq!(
        again.to_string(),
        "request body failed during an earlier send"
    );
}

/// A body of known size, its frames all ready.
struct Ready(std::collections::VecDeque<Bytes>);

impl Body for Ready {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.0.pop_front().map(|data| Ok(Frame::data(data))))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.0.iter().map(|d| d.len() as u64).sum())
    }
}

#[tokio::test]
async fn a_body_its_first_send_began_reading_is_not_read_early() {
    let frames = [Bytes::from_static(b"abc"), Bytes::from_static(b"def")];
    let mut body = ReplayBody::new(Ready(frames.into()), 1024);
    let replica = body.replica();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "abc");
    assert_eq!(replica.fill_ready(), None, "the first send is reading it");
    assert_eq!(collect(body).await.unwrap(), "def");
    assert_eq!(replica.fill_ready().as_deref(), Some(&b"abcdef"[..]));
}

/// Reads `body` frame by frame: its bytes and how many trailers frames
/// it yielded, checking `is_end_stream` says "not yet" until the end.
async fn frames_of<B>(body: B) -> (Vec<u8>, usize)
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    let mut body = body;
    let (mut data, mut trailers) = (Vec::new(), 0);
    loop {
        let ended = body.is_end_stream();
        match body.frame().await {
            None => break,
            Some(frame) => {
                assert!(!ended, "a frame came after is_end_stream said the end");
                let frame = frame.unwrap();
                if let Some(chunk) = frame.data_ref() {
                    data.extend_from_slice(chunk);
                } else if frame.is_trailers() {
                    trailers += 1;
                }
            }
        }
    }
    assert!(body.is_end_stream());
    (data, trailers)
}

#[tokio::test]
async fn every_reader_gets_the_trailers_once_and_knows_its_end() {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-checksum", http::HeaderValue::from_static("42"));
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = vec![
        Ok(Frame::data(Bytes::from_static(b"ab"))),
        Ok(Frame::trailers(trailers)),
    ];
    let first = ReplayBody::new(StreamBody::new(futures_util::stream::iter(frames)), 1024);
    let second = first.try_clone().unwrap();
    assert!(!second.is_end_stream(), "nothing read yet");
    assert_eq!(frames_of(first).await, (b"ab".to_vec(), 1));
    assert!(!second.is_end_stream(), "a replay that has read nothing");
    assert_eq!(frames_of(second).await, (b"ab".to_vec(), 1));
}

#[tokio::test]
async fn a_replay_reaching_the_end_after_another_took_the_trailers_still_gets_them() {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-checksum", http::HeaderValue::from_static("42"));
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = vec![
        Ok(Frame::data(Bytes::from_static(b"ab"))),
        Ok(Frame::trailers(trailers)),
    ];
    let mut first = ReplayBody::new(StreamBody::new(futures_util::stream::iter(frames)), 1024);
    let mut second = first.try_clone().unwrap();
    // The first reads the data and the trailers; the source has not ended.
    assert!(first.frame().await.unwrap().unwrap().is_data());
    assert!(first.frame().await.unwrap().unwrap().is_trailers());
    // The second replays the data, then meets the source's end itself.
    assert!(second.frame().await.unwrap().unwrap().is_data());
    let last = second.frame().await.map(|frame| frame.unwrap());
    assert!(
        last.is_some_and(|frame| frame.is_trailers()),
        "the trailers, before the end"
    );
    assert!(second.frame().await.is_none());
    assert!(
        first.frame().await.is_none(),
        "the trailers once, not twice"
    );
}

#[tokio::test]
async fn a_replay_that_has_read_nothing_is_not_at_its_end() {
    let first = ReplayBody::new(chunked(&["ab"]), 1024);
    let second = first.try_clone().unwrap();
    assert_eq!(collect(first).await.unwrap(), "ab");
    assert!(!second.is_end_stream());
    assert_eq!(frames_of(second).await, (b"ab".to_vec(), 0));
}

#[tokio::test]
async fn a_clone_left_behind_by_the_cap_knows_no_size() {
    let first = ReplayBody::new(chunked(&["abcd", "efgh", "ij"]), 6);
    let behind = first.try_clone().unwrap();
    assert_eq!(collect(first).await.unwrap(), "abcdefghij");
    assert_eq!(behind.size_hint().exact(), None);
    assert_eq!(behind.size_hint().lower(), 0);
}

#[tokio::test]
async fn a_clone_left_behind_by_the_cap_never_reads_the_live_stream() {
    // Over the cap at the first chunk, or at a later one, and streaming
    // on for several more: the clone made before the cap has a prefix
    // missing, and says so however long the stream runs.
    for chunks in [
        &["abcdefgh"][..],
        &["abcdefgh", "ij", "kl"][..],
        &["ab", "cdefgh", "ij", "kl", "mn", "op"][..],
    ] {
        let first = ReplayBody::new(chunked(chunks), 4);
        let behind = first.try_clone().unwrap();
        let sent = collect(first).await.unwrap();
        assert_eq!(sent, chunks.concat());
        let err = collect(behind).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "request body exceeds the 4-byte replay buffer",
            "{chunks:?}"
        );
    }
}

/// Data, then trailers, and its end reported with the trailers.
struct EndsWithTrailers(Option<Frame<Bytes>>, Option<Frame<Bytes>>);

impl Body for EndsWithTrailers {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let next = self.0.take().or_else(|| self.1.take());
        Poll::Ready(next.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none() && self.1.is_none()
    }
}

#[tokio::test]
async fn a_replay_at_a_source_that_ended_with_its_trailers_is_not_at_its_end_before_them() {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-checksum", http::HeaderValue::from_static("42"));
    let source = EndsWithTrailers(
        Some(Frame::data(Bytes::from_static(b"ab"))),
        Some(Frame::trailers(trailers)),
    );
    let mut first = ReplayBody::new(source, 1024);
    let mut second = first.try_clone().unwrap();
    assert!(first.frame().await.unwrap().unwrap().is_data());
    assert!(first.frame().await.unwrap().unwrap().is_trailers());
    assert!(first.is_end_stream());
    assert!(second.frame().await.unwrap().unwrap().is_data());
    assert!(
        !second.is_end_stream(),
        "the trailers are still to come for this clone"
    );
    assert!(second.frame().await.unwrap().unwrap().is_trailers());
    assert!(second.is_end_stream());
}
