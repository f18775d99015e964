//! Requests counted by how they really ended: complete, cut upstream
//! after content, truncated, client gone (abandoned before the answer
//! began included), timed out; the status class its own label.
#![allow(clippy::unwrap_used)]

mod support;

use http_body_util::BodyExt;
use llm_retry_mock::{Reply, Route, SseEvent};
use metrics_exporter_prometheus::PrometheusHandle;
use std::time::Duration;
use support::{gateway, no_env, one_target, post, send, target, PROMPT};

fn delta(text: &str) -> SseEvent {
    SseEvent::new(
        Some("content_block_delta"),
        &format!(
            r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{text}"}}}}"#
        ),
    )
}

/// Waits (polling, at most a minute) until the metrics show `line`.
async fn shows(handle: &PrometheusHandle, line: &str) {
    for _ in 0..600 {
        if handle.render().contains(line) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{line} not in\n{}", handle.render());
}

/// A gateway with one route `name` over one target answering `reply`.
async fn route(
    name: &str,
    reply: Reply,
    top: &str,
) -> (support::Running, llm_retry_mock::MockServer) {
    let upstream = target(Route::always(reply)).await;
    let toml = one_target(&upstream.url(""), top, "max_retries = 0")
        .replace("name = \"r\"", &format!("name = \"{name}\""));
    (gateway(&toml, no_env).await, upstream)
}

/// The one test in this binary that installs the process's recorder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_counted_by_how_they_ended() {
    let handle = llm_retry_gateway::prometheus().install_recorder().unwrap();

    // Complete, with the gateway's own time in a header.
    let (gw, _up) = route("whole", Reply::anthropic_ok("hi"), "").await;
    let started = std::time::Instant::now();
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    let waited_ms = started.elapsed().as_secs_f64() * 1000.0;
    let overhead: f64 = head.headers["x-llm-retry-gateway-overhead-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // Inside the client's wait, which contains the gateway's.
    assert!(
        overhead <= waited_ms + 1.0,
        "{overhead} ms of {waited_ms} ms"
    );
    shows(
        &handle,
        r#"llm_retry_gateway_requests_total{route="whole",status="2xx",ending="complete"} 1"#,
    )
    .await;

    // A stream cut by the upstream after its content began.
    // The cut comes a second after the first content, in the second event:
    // time enough, on a loaded machine, for the head to reach the client.
    let first = Reply::sse([delta("Hello")]).expected_body().unwrap().len();
    let cut = Reply::sse([
        delta("Hello"),
        delta(" there").after(Duration::from_secs(1)),
    ])
    .reset_after_bytes(first + 10);
    let (gw, _up) = route("cut", cut, "").await;
    let response = support::client()
        .request(post(&gw.url("/v1/messages"), PROMPT))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.into_body().collect().await.is_err());
    shows(
        &handle,
        r#"llm_retry_gateway_requests_total{route="cut",status="2xx",ending="upstream_cut"} 1"#,
    )
    .await;

    // A JSON answer cut short.
    let short = Reply::anthropic_ok("a longer answer than twenty bytes").reset_after_bytes(20);
    let (gw, _up) = route("short", short, "").await;
    // The cut may reach the client before or after the answer's head.
    let answer = support::client()
        .request(post(&gw.url("/v1/messages"), PROMPT))
        .await;
    if let Ok(response) = answer {
        assert!(response.into_body().collect().await.is_err());
    }
    shows(
        &handle,
        r#"llm_retry_gateway_requests_total{route="short",status="2xx",ending="truncated"} 1"#,
    )
    .await;

    // A stream that stalls after its first content.
    let stalls = Reply::sse([delta("Hi"), delta("late").after(Duration::from_secs(30))]);
    let (gw, _up) = route("stall", stalls, "stream_idle_timeout = \"300ms\"").await;
    let response = support::client()
        .request(post(&gw.url("/v1/messages"), PROMPT))
        .await
        .unwrap();
    assert!(response.into_body().collect().await.is_err());
    shows(
        &handle,
        r#"llm_retry_gateway_requests_total{route="stall",status="2xx",ending="timed_out"} 1"#,
    )
    .await;

    // A client that goes away in the middle of a stream.
    let slow = Reply::sse((0..30).map(|i| delta(&i.to_string()).after(Duration::from_millis(200))));
    let (gw, _up) = route("gone", slow, "").await;
    let response = support::client()
        .request(post(&gw.url("/v1/messages"), PROMPT))
        .await
        .unwrap();
    let mut body = response.into_body();
    body.frame().await.unwrap().unwrap();
    drop(body);
    shows(
        &handle,
        r#"llm_retry_gateway_requests_total{route="gone",status="2xx",ending="client_gone"} 1"#,
    )
    .await;

    // A client that goes away before the answer began.
    let late = Reply::anthropic_ok("late").delay(Duration::from_secs(30));
    let (gw, _up) = route("abandoned", late, "").await;
    let request = support::client().request(post(&gw.url("/v1/messages"), PROMPT));
    assert!(tokio::time::timeout(Duration::from_millis(300), request)
        .await
        .is_err());
    shows(
        &handle,
        r#"llm_retry_gateway_requests_total{route="abandoned",status="none",ending="client_gone"} 1"#,
    )
    .await;
}
