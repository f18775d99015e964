//! A running server's view of its [`Script`]: per-route request counters,
//! limits and outage clocks, and the built-in answers (404, 413,
//! empty route).

use http::HeaderMap;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::limiter::{InFlightSlot, Limiter, Verdict};
use crate::reply::Reply;
use crate::script::{
    fnv1a, path_salt, splitmix64, ByModel, Limited, Outage, Picker, Route, RouteKind, Script,
};

/// Salt for the fallback route, distinct from any path's FNV hash in practice.
const FALLBACK_SALT: u64 = 0x6C6C_6D2D_6D6F_636B;

/// The most header values a [`Route::mix_per`] route counts attempts of.
const MAX_COUNTED_VALUES: usize = 1 << 16;

/// One path's route, with its per-server state.
#[derive(Debug)]
struct Slot {
    node: Node,
    salt: u64,
}

/// A [`Route`] with its per-server state: counters and limits.
#[derive(Debug)]
enum Node {
    Pick {
        picker: Picker,
        hits: AtomicU64,
        /// Per header value (its hash), the requests answered so far.
        attempts: Mutex<HashMap<u64, u64>>,
    },
    Outage {
        window: Range<Duration>,
        during: Reply,
        otherwise: Box<Node>,
    },
    Limited {
        limiter: Limiter,
        when_limited: Reply,
        admitted: Box<Node>,
    },
    ByModel {
        models: Vec<(String, Node)>,
        otherwise: Box<Node>,
    },
}

impl Node {
    fn new(route: Route, started: Instant) -> Node {
        match route.kind {
            RouteKind::Pick(picker) => Node::Pick {
                picker,
                hits: AtomicU64::new(0),
                attempts: Mutex::default(),
            },
            RouteKind::Outage(o) => {
                let Outage {
                    window,
                    during,
                    otherwise,
                } = *o;
                Node::Outage {
                    window,
                    during,
                    otherwise: Box::new(Node::new(otherwise, started)),
                }
            }
            RouteKind::Limited(l) => {
                let Limited {
                    limit,
                    when_limited,
                    admitted,
                } = *l;
                Node::Limited {
                    limiter: Limiter::new(&limit, started),
                    when_limited,
                    admitted: Box::new(Node::new(admitted, started)),
                }
            }
            RouteKind::ByModel(b) => {
                let ByModel { models, otherwise } = *b;
                Node::ByModel {
                    models: models
                        .into_iter()
                        .map(|(model, route)| (model, Node::new(route, started)))
                        .collect(),
                    otherwise: Box::new(Node::new(otherwise, started)),
                }
            }
        }
    }

    /// The reply to a request with `body`; an admitted request under
    /// in-flight ceilings also gets their `slots`, to hold until answered.
    fn next(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        seed: u64,
        salt: u64,
        started: Instant,
        slots: &mut Vec<InFlightSlot>,
    ) -> Reply {
        match self {
            Node::Pick {
                picker,
                hits,
                attempts,
            } => {
                let value = picker.per().and_then(|name| headers.get(name));
                let nth = match value {
                    Some(value) => nth_attempt(attempts, value.as_bytes()),
                    None => hits.fetch_add(1, Ordering::Relaxed),
                };
                picker.pick(nth, seed, salt).cloned().unwrap_or_else(|| {
                    Reply::anthropic_error(
                        500,
                        "api_error",
                        "llm-retry-mock: this route has no replies",
                    )
                })
            }
            Node::Outage {
                window,
                during,
                otherwise,
            } => {
                let since_start = Instant::now().saturating_duration_since(started);
                if window.contains(&since_start) {
                    during.clone()
                } else {
                    otherwise.next(headers, body, seed, salt, started, slots)
                }
            }
            Node::Limited {
                limiter,
                when_limited,
                admitted,
            } => {
                let now = Instant::now();
                match limiter.decide(limiter.cost(body), now, when_limited) {
                    Verdict::Refused(reply) => reply,
                    Verdict::Admitted(added, held) => {
                        let mut reply = admitted.next(headers, body, seed, salt, started, slots);
                        slots.extend(held);
                        for (name, value) in added {
                            reply = reply.header(name, &value);
                        }
                        reply
                    }
                }
            }
            Node::ByModel { models, otherwise } => {
                let named = body_model(body);
                let node = named
                    .as_deref()
                    .and_then(|name| models.iter().find(|(model, _)| model == name))
                    .map_or(&**otherwise, |(_, node)| node);
                node.next(headers, body, seed, salt, started, slots)
            }
        }
    }
}

/// The draw of a request whose header `value` this route answered
/// `n` times before: the same for the same value and `n`, whatever came
/// in between.
fn nth_attempt(attempts: &Mutex<HashMap<u64, u64>>, value: &[u8]) -> u64 {
    let id = fnv1a(value);
    let mut attempts = attempts.lock().unwrap_or_else(PoisonError::into_inner);
    if attempts.len() >= MAX_COUNTED_VALUES && !attempts.contains_key(&id) {
        attempts.clear();
    }
    let n = attempts.entry(id).or_default();
    let nth = splitmix64(id).wrapping_add(*n);
    *n += 1;
    nth
}

/// The `model` a JSON request body names, if it is a JSON object with a
/// string `model`; `None` for anything else, never a panic.
fn body_model(body: &[u8]) -> Option<String> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(mut fields)) => match fields.remove("model") {
            Some(serde_json::Value::String(model)) => Some(model),
            _ => None,
        },
        _ => None,
    }
}

/// Chooses the reply for each request of one server.
#[derive(Debug)]
pub(crate) struct Router {
    routes: HashMap<String, Slot>,
    fallback: Option<Slot>,
    seed: u64,
    max_request_body: usize,
    started: Instant,
}

impl Router {
    /// A router whose clock (outage windows, full buckets) starts now.
    pub(crate) fn new(script: Script) -> Router {
        let started = Instant::now();
        let slot = |route: Route, salt: u64| Slot {
            node: Node::new(route, started),
            salt,
        };
        Router {
            routes: script
                .routes
                .into_iter()
                .map(|(path, route)| {
                    let salt = path_salt(&path);
                    (path, slot(route, salt))
                })
                .collect(),
            fallback: script.fallback.map(|r| slot(r, FALLBACK_SALT)),
            seed: script.seed,
            max_request_body: script.max_request_body,
            started,
        }
    }

    /// When this router (and its server) started.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    pub(crate) fn max_request_body(&self) -> usize {
        self.max_request_body
    }

    /// The reply for the next request to `path`, whose body is `body`;
    /// counts it. An admitted request under an in-flight ceiling holds the
    /// returned slot until its answer is over.
    pub(crate) fn select(
        &self,
        path: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> (Reply, Vec<InFlightSlot>) {
        let mut held = Vec::new();
        let reply = match self.routes.get(path).or(self.fallback.as_ref()) {
            Some(slot) => {
                slot.node
                    .next(headers, body, self.seed, slot.salt, self.started, &mut held)
            }
            None => Reply::anthropic_error(
                404,
                "not_found_error",
                &format!("llm-retry-mock: no route for {path}"),
            ),
        };
        (reply, held)
    }

    /// The answer to a body over the cap.
    pub(crate) fn too_large(&self) -> Reply {
        Reply::anthropic_error(
            413,
            "request_too_large",
            &format!(
                "llm-retry-mock: request body exceeds {} bytes",
                self.max_request_body
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_model_reads_a_string_model_and_nothing_else() {
        let cases: [(&[u8], Option<&str>); 9] = [
            (
                br#"{"model":"claude-opus-4-5","max_tokens":8}"#,
                Some("claude-opus-4-5"),
            ),
            (br#"{"max_tokens":8,"model":"gpt-4o"}"#, Some("gpt-4o")),
            (br#"{"model":"a\u0062c"}"#, Some("abc")),
            (br#"{"model":7}"#, None),
            (br#"{"model":null}"#, None),
            (br#"{"messages":[]}"#, None),
            (br#"["model","x"]"#, None),
            (br#"{"model":"cut"#, None),
            (b"\xff\xfe not json", None),
        ];
        for (body, want) in cases {
            assert_eq!(body_model(body).as_deref(), want, "{body:?}");
        }
    }

    /// Each model's route keeps its own counter; anything else goes to
    /// the fallback route.
    #[test]
    fn by_model_routes_on_the_body_and_counts_per_model() {
        let route = Route::by_model(
            [
                (
                    "held",
                    Route::sequence([Reply::status(429), Reply::status(200)]),
                ),
                ("free", Route::always(Reply::status(201))),
            ],
            Route::always(Reply::status(404)),
        );
        let router = Router::new(Script::new().route("/m", route));
        let status = |body: &[u8]| match router.select("/m", &HeaderMap::new(), body).0 {
            Reply::Response(reply) => reply.status().as_u16(),
            Reply::ResetBeforeHeaders { .. } => 0,
        };
        assert_eq!(status(br#"{"model":"free"}"#), 201);
        assert_eq!(status(br#"{"model":"held"}"#), 429);
        assert_eq!(status(br#"{"model":"free"}"#), 201);
        assert_eq!(status(br#"{"model":"held"}"#), 200);
        assert_eq!(status(br#"{"model":"other"}"#), 404);
        assert_eq!(status(b""), 404);
        assert_eq!(status(b"{\"model\":"), 404);
    }

    fn status_of(reply: Reply) -> u16 {
        match reply {
            Reply::Response(reply) => reply.status().as_u16(),
            Reply::ResetBeforeHeaders { .. } => 0,
        }
    }

    /// A `mix_per` route draws by the header's value and its attempt: two
    /// servers that see the same requests arrive in different orders
    /// answer each request's nth attempt alike.
    #[test]
    fn mix_per_draws_by_value_and_attempt_not_by_arrival() {
        let id = http::HeaderName::from_static("x-id");
        let route = Route::mix_per(
            id.clone(),
            [(1, Reply::status(200)), (1, Reply::status(500))],
        );
        let answers = |order: &[u32]| {
            let router = Router::new(Script::new().seed(7).route("/m", route.clone()));
            let mut tries = HashMap::new();
            let mut seen = HashMap::new();
            for value in order {
                let mut headers = HeaderMap::new();
                headers.insert(id.clone(), http::HeaderValue::from(*value));
                let attempt = tries.entry(*value).or_insert(0u32);
                let status = status_of(router.select("/m", &headers, b"").0);
                seen.insert((*value, *attempt), status);
                *attempt += 1;
            }
            seen
        };
        let forward: Vec<u32> = (0..50).flat_map(|value| [value; 3]).collect();
        let backward: Vec<u32> = forward.iter().rev().copied().collect();
        let drawn = answers(&forward);
        assert_eq!(drawn, answers(&backward));
        let ok = drawn.values().filter(|status| **status == 200).count();
        assert!((45..=105).contains(&ok), "{ok} of 150 should be ~75");
        // A request without the header draws by arrival, as `mix` does.
        let router = Router::new(Script::new().seed(7).route("/m", route));
        let statuses: Vec<u16> = (0..40)
            .map(|_| status_of(router.select("/m", &HeaderMap::new(), b"").0))
            .collect();
        assert!(statuses.contains(&200) && statuses.contains(&500));
    }
}
