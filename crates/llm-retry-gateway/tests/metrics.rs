//! The gateway's metrics: what requests through it record, and the
//! exporter's settings (latency histograms with buckets).
#![allow(clippy::unwrap_used)]

mod support;

use llm_retry_mock::{Reply, Route};
use support::{gateway, no_env, one_target, post, send, target, PROMPT};

/// The one test in this binary that installs the process's recorder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_record_their_route_status_target_time_and_budget() {
    let handle = llm_retry_gateway::prometheus().install_recorder().unwrap();
    let upstream = target(Route::sequence([
        Reply::status(503),
        Reply::anthropic_ok("hi"),
        Reply::anthropic_ok("again"),
    ]))
    .await;
    let toml = one_target(&upstream.url(""), "", "").replace(
        "name = \"r\"",
        "name = \"r\"\npath_prefix = \"/v1/messages\"",
    );
    let gw = gateway(&toml, no_env).await;
    for _ in 0..2 {
        let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
        assert_eq!(head.status, 200);
    }
    let (head, _) = send(post(&gw.url("/v1/nowhere"), PROMPT)).await;
    assert_eq!(head.status, 404);
    let text = handle.render();
    for line in [
        r#"llm_retry_gateway_requests_total{route="r",status="2xx",ending="complete"} 2"#,
        r#"llm_retry_gateway_requests_total{route="none",status="4xx",ending="complete"} 1"#,
        r#"llm_retry_gateway_target_seconds_count{route="r",target="a"} 2"#,
        r#"llm_retry_budget_available{budget="r/a"}"#,
        r#"llm_retry_retries_total{class="status"} 1"#,
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}

#[test]
fn latency_histograms_render_with_buckets() {
    let recorder = llm_retry_gateway::prometheus().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        metrics::histogram!("llm_retry_gateway_target_seconds", "route" => "r", "target" => "a")
            .record(0.3);
    });
    let text = handle.render();
    assert!(
        text.contains(
            r#"llm_retry_gateway_target_seconds_bucket{route="r",target="a",le="0.5"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"llm_retry_gateway_target_seconds_bucket{route="r",target="a",le="0.25"} 0"#
        ),
        "{text}"
    );
}
