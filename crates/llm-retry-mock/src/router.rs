//! A running server's view of its [`Script`]: per-route request counters and
//! the built-in answers (404, 413, empty route).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::reply::Reply;
use crate::script::{path_salt, Route, Script};

/// Salt for the fallback route, distinct from any path's FNV hash in practice.
const FALLBACK_SALT: u64 = 0x6C6C_6D2D_6D6F_636B;

#[derive(Debug)]
struct Slot {
    route: Route,
    hits: AtomicU64,
    salt: u64,
}

impl Slot {
    fn new(route: Route, salt: u64) -> Slot {
        Slot {
            route,
            hits: AtomicU64::new(0),
            salt,
        }
    }

    fn next(&self, seed: u64) -> Reply {
        let nth = self.hits.fetch_add(1, Ordering::Relaxed);
        self.route
            .pick(nth, seed, self.salt)
            .cloned()
            .unwrap_or_else(|| {
                Reply::anthropic_error(
                    500,
                    "api_error",
                    "llm-retry-mock: this route has no replies",
                )
            })
    }
}

/// Chooses the reply for each request of one server.
#[derive(Debug)]
pub(crate) struct Router {
    routes: HashMap<String, Slot>,
    fallback: Option<Slot>,
    seed: u64,
    max_request_body: usize,
}

impl Router {
    pub(crate) fn new(script: Script) -> Router {
        Router {
            routes: script
                .routes
                .into_iter()
                .map(|(path, route)| {
                    let salt = path_salt(&path);
                    (path, Slot::new(route, salt))
                })
                .collect(),
            fallback: script.fallback.map(|r| Slot::new(r, FALLBACK_SALT)),
            seed: script.seed,
            max_request_body: script.max_request_body,
        }
    }

    pub(crate) fn max_request_body(&self) -> usize {
        self.max_request_body
    }

    /// The reply for the next request to `path`; counts it.
    pub(crate) fn select(&self, path: &str) -> Reply {
        match self.routes.get(path).or(self.fallback.as_ref()) {
            Some(slot) => slot.next(self.seed),
            None => Reply::anthropic_error(
                404,
                "not_found_error",
                &format!("llm-retry-mock: no route for {path}"),
            ),
        }
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
