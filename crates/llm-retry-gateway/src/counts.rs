//! The gateway's request counter by route, status class and ending, its
//! handles looked up once per route rather than once per request.

use crate::ending::Ending;
use http::StatusCode;
use metrics::Counter;
use std::sync::OnceLock;

/// The status classes counted (a fixed vocabulary); `none` when no answer
/// began (the client went away first).
const CLASSES: [&str; 5] = ["2xx", "4xx", "5xx", "other", "none"];

/// `llm_retry_gateway_requests_total` for one route (`none` for answers
/// given before a route was chosen), by status class and how the request
/// ended. The handles are resolved at the first count, from the recorder
/// installed then.
#[derive(Debug)]
pub(crate) struct RequestCounts {
    route: String,
    by_class: OnceLock<[[Counter; 5]; 5]>,
}

impl RequestCounts {
    pub(crate) fn new(route: &str) -> RequestCounts {
        RequestCounts {
            route: route.to_owned(),
            by_class: OnceLock::new(),
        }
    }

    /// The route's name.
    pub(crate) fn route(&self) -> &str {
        &self.route
    }

    /// Counts a request whose answer had `status` (none: no answer began)
    /// and ended so.
    pub(crate) fn count(&self, status: Option<StatusCode>, ending: Ending) {
        let counters = self.by_class.get_or_init(|| {
            CLASSES.map(|class| {
                Ending::ALL.map(|ending| {
                    metrics::counter!(
                        "llm_retry_gateway_requests_total",
                        "route" => self.route.clone(),
                        "status" => class,
                        "ending" => ending.label()
                    )
                })
            })
        });
        let class = match status.map(|s| s.as_u16()) {
            Some(200..=299) => 0,
            Some(400..=499) => 1,
            Some(500..=599) => 2,
            Some(_) => 3,
            None => 4,
        };
        // `ALL` lists the endings in their declared order.
        let ending = ending as usize;
        counters[class][ending].increment(1);
    }
}
