//! The Prometheus exporter the gateway serves `/metrics` from.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Bucket bounds, in seconds, for every `*_seconds` histogram: from 5 ms
/// (a local refusal, time to a fast first token) to 5 minutes (a long
/// stream, a deadline).
pub const SECONDS_BUCKETS: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// The exporter's builder with the gateway's settings: every histogram
/// whose name ends in `_seconds` rendered as a Prometheus histogram with
/// [`SECONDS_BUCKETS`] (without buckets the exporter renders summaries,
/// which cannot be aggregated across gateway instances). Install it (or
/// build a recorder from it) and hand the handle to
/// [`Gateway::with_metrics`](crate::Gateway::with_metrics).
pub fn prometheus() -> PrometheusBuilder {
    // Refused only for an empty bucket list, which this is not.
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &SECONDS_BUCKETS)
        .unwrap_or_else(|_| PrometheusBuilder::new())
}
