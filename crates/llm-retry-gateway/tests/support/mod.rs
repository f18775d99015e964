//! A gateway on loopback in front of mock targets.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry_gateway::{Config, Gateway};
use llm_retry_mock::{MockServer, Route, Script};
use std::net::SocketAddr;

pub const PROMPT: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Hi"}]}"#;

/// A mock target answering `route` on the Anthropic and OpenAI paths.
pub async fn target(route: Route) -> MockServer {
    MockServer::start(
        Script::new()
            .route("/v1/messages", route.clone())
            .route("/v1/chat/completions", route),
    )
    .await
    .unwrap()
}

/// A running gateway and the way to stop it.
pub struct Running {
    pub addr: SocketAddr,
    pub gateway: Gateway,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub served: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends the shutdown signal.
    pub fn signal(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Starts a gateway from `toml` (credentials from `env`) on a free port.
pub async fn gateway(toml: &str, env: fn(&str) -> Option<String>) -> Running {
    let config = Config::parse(toml, env).unwrap();
    let gateway = Gateway::new(&config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(gateway.clone().serve(listener, async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        gateway,
        stop: Some(stop),
        served,
    }
}

pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn post(url: &str, body: &str) -> http::Request<Full<Bytes>> {
    http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

/// Sends `request` and reads the whole answer.
pub async fn send(request: http::Request<Full<Bytes>>) -> (http::response::Parts, Bytes) {
    let response = client().request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    (parts, body.collect().await.unwrap().to_bytes())
}

pub fn no_env(_: &str) -> Option<String> {
    None
}

/// A config with one route over targets `a` then `b` (no retries of their
/// own), and `extra` lines in the route's table.
pub fn two_targets(a: &MockServer, b: &MockServer, extra: &str) -> String {
    format!(
        r#"
[[route]]
name = "r"
deadline = "20s"
{extra}

[[route.target]]
name = "a"
base_url = "{a}"
max_retries = 0

[[route.target]]
name = "b"
base_url = "{b}"
max_retries = 0
"#,
        a = a.url(""),
        b = b.url("")
    )
}

/// Anthropic's 429, naming `secs` as its wait.
pub fn rate_limited(secs: &str) -> llm_retry_mock::Reply {
    llm_retry_mock::Reply::anthropic_error(429, "rate_limit_error", "Rate limited")
        .header("retry-after", secs)
}

/// A config with `top` lines, then one route over one target at
/// `base_url` with `target` lines in its table.
pub fn one_target(base_url: &str, top: &str, target: &str) -> String {
    format!("{top}\n[[route]]\nname = \"r\"\n[[route.target]]\nname = \"a\"\nbase_url = \"{base_url}\"\n{target}\n")
}
