//! What the rate-limit gate logs: a send that waits for its slot says how
//! long, once; a send that goes at once says nothing; a refusal warns with
//! its reason. One global capturing subscriber (a thread-local one misses
//! events when tests race tracing's interest cache), and one test.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use llm_retry::rate_limit::{Quotas, RateLimitLayer, TokenCost};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{Layer, ServiceExt};

/// A `MakeWriter` that appends every log line to a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// The lines logged since the last call.
    fn take(&self) -> Vec<String> {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap());
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn a_send_that_waits_logs_its_wait_once_and_a_refusal_warns() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let upstream = tower::service_fn(|_req: Request<()>| async {
        Ok::<_, llm_retry::BoxError>(Response::new(Full::new(Bytes::new())))
    });
    let gate = RateLimitLayer::new(
        Quotas::none()
            .requests_per_minute_with_burst(60, 1)
            .tokens_per_minute(1_000),
    )
    .unwrap()
    .layer(upstream);
    let send = |cost: u64| {
        let mut request = Request::get("http://a.test/").body(()).unwrap();
        request.extensions_mut().insert(TokenCost(cost));
        gate.clone().oneshot(request)
    };
    let waits = |lines: &[String]| {
        lines
            .iter()
            .filter(|line| line.contains("waiting for a rate-limit slot"))
            .count()
    };

    send(1).await.unwrap();
    let first = logs.take();
    assert_eq!(waits(&first), 0, "the first goes at once: {first:?}");

    let start = tokio::time::Instant::now();
    send(1).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    let second = logs.take();
    assert_eq!(waits(&second), 1, "{second:?}");
    assert!(
        second
            .iter()
            .any(|line| line.contains("DEBUG") && line.contains("wait_ms=1000")),
        "{second:?}"
    );

    assert!(send(5_000).await.is_err());
    let refused = logs.take();
    assert_eq!(waits(&refused), 0, "{refused:?}");
    assert!(
        refused
            .iter()
            .any(|line| line.contains("WARN") && line.contains("rate limit refused a send")),
        "{refused:?}"
    );
}
