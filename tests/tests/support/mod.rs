//! Shared pieces for the loopback tests: a real hyper-util client and fast policies.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::backoff::Jitter;
use llm_retry::{ReplayBody, RetryPolicy};
use std::time::Duration;

pub const PROMPT: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Hi"}]}"#;
pub const API_KEY: &str = "sk-ant-api03-SECRET-never-logged";

/// A client for requests wrapped by `RetryLayer` (bodies become `ReplayBody<B>`).
pub fn client<B>() -> Client<HttpConnector, ReplayBody<B>>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<llm_retry::BoxError>,
{
    Client::builder(TokioExecutor::new()).build_http()
}

/// A policy with millisecond steps so loopback tests finish quickly.
pub fn fast_policy() -> llm_retry::RetryPolicyBuilder {
    RetryPolicy::builder()
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(5))
        .jitter(Jitter::None)
        .seed(1)
}

/// A Messages API request carrying a secret key header.
pub fn messages_request(url: &str) -> http::Request<Full<Bytes>> {
    http::Request::post(url)
        .header("content-type", "application/json")
        .header("x-api-key", API_KEY)
        .header("authorization", format!("Bearer {API_KEY}"))
        .body(Full::new(Bytes::from_static(PROMPT.as_bytes())))
        .unwrap()
}

/// The hyper-util client type the tests wrap.
pub type TestClient = Client<HttpConnector, ReplayBody<Full<Bytes>>>;

/// A mock upstream serving `route` at `/v1/messages`.
pub async fn mock(route: llm_retry_mock::Route) -> llm_retry_mock::MockServer {
    llm_retry_mock::MockServer::start(llm_retry_mock::Script::new().route("/v1/messages", route))
        .await
        .unwrap()
}

/// Sends a messages request to `mock` through `RetryLayer` with `policy`.
pub async fn send(
    policy: RetryPolicy,
    mock: &llm_retry_mock::MockServer,
) -> Result<http::Response<llm_retry::RetryBody<hyper::body::Incoming>>, llm_retry::BoxError> {
    use tower::{Layer, ServiceExt};
    llm_retry::RetryLayer::new(policy)
        .layer(client())
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
}

/// Sends a messages request to `mock` through `RetryLayer` with `policy`
/// and a [`Recorder`]: the result, and every line the hooks recorded.
pub async fn send_recorded(
    policy: RetryPolicy,
    mock: &llm_retry_mock::MockServer,
) -> (
    Result<http::Response<llm_retry::RetryBody<hyper::body::Incoming>>, llm_retry::BoxError>,
    Vec<String>,
) {
    use tower::{Layer, ServiceExt};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let result = llm_retry::RetryLayer::new(policy)
        .with_hooks(Recorder(tx))
        .layer(client())
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await;
    (result, drain(&mut rx))
}

/// Hooks that forward a line per callback to a channel.
pub struct Recorder(pub tokio::sync::mpsc::UnboundedSender<String>);

impl llm_retry::RetryHooks for Recorder {
    fn on_retry(&self, e: &llm_retry::RetryEvent) {
        let _ = self.0.send(format!(
            "retry {}/{} after {:?} status={:?} error={:?} {e:?}",
            e.retry, e.max_retries, e.delay, e.status, e.error
        ));
    }
    fn on_recover(&self, e: &llm_retry::RecoveryEvent) {
        let _ = self.0.send(format!("recover {e:?}"));
    }
    fn on_recovered(&self, r: &llm_retry::RetryReport) {
        let _ = self.0.send(format!("recovered after {}", r.attempts));
    }
    fn on_give_up(&self, r: &llm_retry::RetryReport) {
        let _ = self.0.send(format!("give up: {r} {r:?}"));
    }
}

/// Everything a [`Recorder`] forwarded so far.
pub fn drain(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Vec<String> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

/// Every log line of the test binary, appended to a shared buffer (a
/// `MakeWriter`).
#[derive(Clone, Default)]
pub struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Captured {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines logged since the last call.
    pub fn take_lines(&self) -> Vec<String> {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap());
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl std::io::Write for Captured {
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

/// The binary's one global log buffer, at every level, installed on first
/// use (a thread-local subscriber misses events when tests race tracing's
/// process-wide interest cache).
pub fn captured_logs() -> Captured {
    static LOGS: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(captured.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("only this binary installs one");
        captured
    })
    .clone()
}
