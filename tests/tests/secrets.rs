//! No secret reaches logs, hooks, reports or errors. Every test in this
//! binary logs into one global capturing subscriber (a thread-local one
//! misses events when tests race tracing's process-wide interest cache), and
//! each asserts that no secret appears anywhere in what was captured.
#![allow(clippy::unwrap_used)]

mod support;

use http::{HeaderMap, StatusCode};
use llm_retry::policy::RefreshCredentials;
use llm_retry::{BoxError, RetryLayer, RetryReport};
use llm_retry_mock::{Reply, Route};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use support::{
    captured_logs, client, drain, fast_policy, messages_request, mock, send_recorded, Recorder,
    API_KEY,
};
use tokio::sync::mpsc;
use tower::{Layer, ServiceExt};

fn assert_no_secret(parts: [(&str, String); 3]) {
    for (what, text) in parts {
        assert!(!text.contains("SECRET"), "{what} leaked a key: {text}");
    }
}

#[tokio::test]
async fn no_secret_reaches_logs_hooks_reports_or_errors() {
    let captured = captured_logs();
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

    let logs = captured.text();
    assert!(logs.contains("retrying"), "the retry path logged: {logs}");
    assert!(
        logs.contains("http.request.resend_count=2"),
        "resends are counted on the span: {logs}"
    );
    let hooks: String = drain(&mut rx).join("\n");
    assert!(hooks.contains("give up"), "{hooks}");
    assert_no_secret([
        ("logs", logs),
        ("hooks", hooks),
        ("report", format!("{report:?} {report}")),
    ]);
    // The key did reach the upstream, where it belongs.
    assert!(mock
        .requests()
        .iter()
        .all(|r| r.header_str("x-api-key") == Some(API_KEY)));
}

/// A credential hook handing out a new key.
struct Refresher;

const FRESH_KEY: &str = "sk-ant-api03-FRESHSECRET-after-refresh";

impl RefreshCredentials for Refresher {
    fn refresh(&self) -> Pin<Box<dyn Future<Output = Result<HeaderMap, BoxError>> + Send>> {
        Box::pin(async {
            let mut headers = http::HeaderMap::new();
            headers.insert("x-api-key", http::HeaderValue::from_static(FRESH_KEY));
            Ok(headers)
        })
    }
}

#[tokio::test]
async fn neither_the_old_nor_the_refreshed_credential_is_logged() {
    let captured = captured_logs();
    let unauthorized = Reply::anthropic_error(401, "authentication_error", "invalid x-api-key");
    let mock = mock(Route::sequence([
        unauthorized,
        Reply::status(503),
        Reply::anthropic_ok("ok"),
    ]))
    .await;
    let policy = fast_policy()
        .refresh_credentials(Refresher)
        .build()
        .unwrap();
    let (res, recorded) = send_recorded(policy, &mock).await;
    let res = res.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let report = res.extensions().get::<RetryReport>().unwrap();
    let logs = captured.text();
    assert!(
        logs.contains("credentials refreshed"),
        "the refresh path logged: {logs}"
    );
    let hooks: String = recorded.join("\n");
    assert!(hooks.contains("RefreshCredentials"), "{hooks}");
    assert_no_secret([
        ("logs", logs),
        ("hooks", hooks),
        ("report", format!("{report:?} {report}")),
    ]);
    let keys: Vec<_> = mock
        .requests()
        .iter()
        .map(|r| r.header_str("x-api-key").unwrap().to_owned())
        .collect();
    assert_eq!(keys, [API_KEY, FRESH_KEY, FRESH_KEY]);
}

#[tokio::test]
async fn a_stream_error_event_prints_no_header_value_of_its_head() {
    let captured = captured_logs();
    let event = Reply::anthropic_stream_error("invalid_request_error", "bad request")
        .header("set-cookie", &format!("session={API_KEY}"))
        .header("x-should-retry", "false");
    let mock = mock(Route::always(event)).await;
    let svc = tower::ServiceBuilder::new()
        .layer(RetryLayer::new(fast_policy().build().unwrap()))
        .layer(llm_retry::stream_guard::StreamGuardLayer::new())
        .service(client());
    let error = svc
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap_err();
    let mut chain = format!("{error:?} {error}");
    let mut source = std::error::Error::source(&*error);
    while let Some(link) = source {
        chain.push_str(&format!(" {link:?} {link}"));
        source = link.source();
    }
    assert!(chain.contains("set-cookie"), "names are kept: {chain}");
    assert_no_secret([
        ("logs", captured.text()),
        ("error chain", chain),
        ("nothing", String::new()),
    ]);
}

/// Hooks and logs of a request whose first send fails with a client error
/// naming `url`, as reqwest names the URL it sent to.
async fn hooks_after_a_client_error_naming(url: String) -> String {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let upstream = tower::service_fn(
        move |_: http::Request<llm_retry::ReplayBody<http_body_util::Full<bytes::Bytes>>>| {
            let first = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
            let message = format!("error sending request for url ({url})");
            async move {
                if first {
                    return Err::<
                        http::Response<http_body_util::Full<bytes::Bytes>>,
                        llm_retry::BoxError,
                    >(message.into());
                }
                Ok(http::Response::new(http_body_util::Full::default()))
            }
        },
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let svc = RetryLayer::new(fast_policy().build().unwrap())
        .with_hooks(Recorder(tx))
        .layer(upstream);
    let res = svc
        .oneshot(messages_request("https://api.test/v1"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    drain(&mut rx).join("\n")
}

#[tokio::test]
async fn a_key_in_a_client_error_url_reaches_no_hook_or_log() {
    let captured = captured_logs();
    // Where the URL's text holds what also closes the text around it: an
    // IPv6 host's `]`, a `)` or a quote inside the query.
    let cases = [
        ("https://api.test/v1?key={KEY}", "api.test/v1?…)"),
        (
            "http://[::1]:8080/v1beta/models/m:generate?key={KEY}",
            "[::1]:8080/v1beta/models/m:generate?…)",
        ),
        (
            "https://gw.test/v1/chat?tag=(a)&key={KEY}",
            "gw.test/v1/chat?…)",
        ),
        (
            "https://gw.test/v1/chat?q='a'&key={KEY}",
            "gw.test/v1/chat?…)",
        ),
        ("https://user:{KEY}@[::1]/v1", "https://…@[::1]/v1)"),
    ];
    for (url, shown) in cases {
        let hooks = hooks_after_a_client_error_naming(url.replace("{KEY}", API_KEY)).await;
        assert!(hooks.contains(shown), "{shown} in {hooks}");
        assert_no_secret([
            ("logs", captured.text()),
            ("hooks", hooks),
            ("nothing", String::new()),
        ]);
    }
}
