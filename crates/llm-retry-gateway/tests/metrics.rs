//! The Prometheus exporter's settings: latency histograms with buckets.
#![allow(clippy::unwrap_used)]

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
