//! No secret reaches logs, hooks, reports or errors. Alone in its test
//! binary: tracing's per-callsite interest cache is process-wide, so a
//! thread-local subscriber only sees every event when no other test races it.
#![allow(clippy::unwrap_used)]

mod support;

use http::StatusCode;
use llm_retry::{RetryEvent, RetryHooks, RetryLayer, RetryReport};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::io::Write;
use std::sync::{Arc, Mutex};
use support::{client, fast_policy, messages_request, API_KEY};
use tokio::sync::mpsc;
use tower::{Layer, ServiceExt};

/// Hooks that forward everything they see to a channel.
struct Recorder(mpsc::UnboundedSender<String>);

impl RetryHooks for Recorder {
    fn on_retry(&self, e: &RetryEvent) {
        let _ = self.0.send(format!(
            "retry {} status={:?} error={:?} {:?}",
            e.retry, e.status, e.error, e
        ));
    }
    fn on_give_up(&self, r: &RetryReport) {
        let _ = self.0.send(format!("give up: {r} {r:?}"));
    }
}

async fn mock(route: Route) -> MockServer {
    MockServer::start(Script::new().route("/v1/messages", route))
        .await
        .unwrap()
}

/// A `MakeWriter` that appends every log line to a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

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

#[tokio::test]
async fn no_secret_reaches_logs_hooks_reports_or_errors() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mock = mock(Route::sequence([
        Reply::rate_limited(Some(0)),
        Reply::reset_before_headers(),
        Reply::anthropic_error(401, "authentication_error", "invalid x-api-key"),
    ]))
    .await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let svc = RetryLayer::new(fast_policy().build().unwrap())
        .with_hooks(Recorder(tx))
        .layer(client());
    let url = format!("{}?key={API_KEY}", mock.url("/v1/messages"));
    let res = svc.oneshot(messages_request(&url)).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let report = res.extensions().get::<RetryReport>().unwrap();

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("retrying"), "the retry path logged: {logs}");
    assert!(
        logs.contains("http.request.resend_count=2"),
        "resends are counted on the span: {logs}"
    );
    let hooks: String = std::iter::from_fn(|| rx.try_recv().ok())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(hooks.contains("give up"), "{hooks}");
    for (what, text) in [
        ("logs", logs),
        ("hooks", hooks),
        ("report", format!("{report:?} {report}")),
    ] {
        assert!(!text.contains("SECRET"), "{what} leaked the key: {text}");
    }
    // The key did reach the upstream, where it belongs.
    assert!(mock
        .requests()
        .iter()
        .all(|r| r.header_str("x-api-key") == Some(API_KEY)));
}
