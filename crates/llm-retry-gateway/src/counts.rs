//! The gateway's request counter by route and status class, its handles
//! looked up once per route rather than once per request.

use http::StatusCode;
use metrics::Counter;
use std::sync::OnceLock;

/// The status classes counted (a fixed vocabulary).
const CLASSES: [&str; 4] = ["2xx", "4xx", "5xx", "other"];

/// `llm_retry_gateway_requests_total` for one route (`none` for answers
/// given before a route was chosen). The handles are resolved at the first
/// count, from the recorder installed then.
#[derive(Debug)]
pub(crate) struct RequestCounts {
    route: String,
    by_class: OnceLock<[Counter; 4]>,
}

impl RequestCounts {
    pub(crate) fn new(route: &str) -> RequestCounts {
        RequestCounts {
            route: route.to_owned(),
            by_class: OnceLock::new(),
        }
    }

    /// Counts an answer with `status`.
    pub(crate) fn count(&self, status: StatusCode) {
        let counters = self.by_class.get_or_init(|| {
            CLASSES.map(|class| {
                metrics::counter!(
                    "llm_retry_gateway_requests_total",
                    "route" => self.route.clone(),
                    "status" => class
                )
            })
        });
        let class = match status.as_u16() {
            200..=299 => 0,
            400..=499 => 1,
            500..=599 => 2,
            _ => 3,
        };
        counters[class].increment(1);
    }
}
