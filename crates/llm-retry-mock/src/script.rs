//! What to answer, per path: [`Script`] and [`Route`], and the pure
//! selection of the nth reply.
//!
//! A script is plain data: every [`MockServer`](crate::MockServer) started
//! from it keeps its own per-route request counters, token buckets and start
//! time, so one script can start many independent servers.

use http::HeaderName;
use std::ops::Range;
use std::time::Duration;

use crate::limit::Limit;
use crate::reply::Reply;

/// Default cap on a request body: 64 MiB.
pub const DEFAULT_MAX_REQUEST_BODY: usize = 64 * 1024 * 1024;

/// The whole behaviour of a mock server: routes by exact path, an optional
/// fallback, a seed for [`Route::mix`], and a request-body cap.
///
/// ```
/// use llm_retry_mock::{Reply, Route, Script};
///
/// let script = Script::new()
///     .route("/v1/messages", Route::sequence([Reply::overloaded(), Reply::anthropic_ok("hi")]))
///     .route("/v1/chat/completions", Route::always(Reply::openai_ok("hi")))
///     .fallback(Route::always(Reply::status(418)))
///     .seed(7)
///     .max_request_body(1 << 20);
/// # let _ = script;
/// ```
#[derive(Debug, Clone)]
pub struct Script {
    pub(crate) routes: Vec<(String, Route)>,
    pub(crate) fallback: Option<Route>,
    pub(crate) seed: u64,
    pub(crate) max_request_body: usize,
}

impl Default for Script {
    fn default() -> Script {
        Script::new()
    }
}

impl Script {
    /// An empty script: every path gets a `404` Anthropic-style
    /// `not_found_error`, seed 0, 64 MiB body cap.
    pub fn new() -> Script {
        Script {
            routes: Vec::new(),
            fallback: None,
            seed: 0,
            max_request_body: DEFAULT_MAX_REQUEST_BODY,
        }
    }

    /// Answers requests whose path (without the query) is exactly `path`
    /// with `route`. Routing the same path again replaces the earlier route.
    pub fn route(mut self, path: &str, route: Route) -> Script {
        match self.routes.iter_mut().find(|(p, _)| p == path) {
            Some(slot) => slot.1 = route,
            None => self.routes.push((path.to_owned(), route)),
        }
        self
    }

    /// Answers every path without a route with `route` instead of a 404.
    pub fn fallback(mut self, route: Route) -> Script {
        self.fallback = Some(route);
        self
    }

    /// Seeds [`Route::mix`]: the same seed gives the same choice for the nth
    /// request to a route, on every run and platform (default 0).
    pub fn seed(mut self, seed: u64) -> Script {
        self.seed = seed;
        self
    }

    /// Caps request bodies at `bytes` (default 64 MiB). A larger request is
    /// recorded with its body cut at the cap and answered `413`
    /// (`request_too_large`) without consuming a route's reply.
    pub fn max_request_body(mut self, bytes: usize) -> Script {
        self.max_request_body = bytes;
        self
    }
}

/// How one path answers successive requests.
///
/// A route with no replies at all (an empty sequence or mix) answers `500`
/// with an `api_error` saying so.
///
/// Besides the plain routes ([`Route::always`], [`Route::sequence`],
/// [`Route::sequence_then`], [`Route::mix`]) wrappers model an upstream
/// under load, on the tokio clock: [`Route::capacity`] (a token bucket),
/// [`Route::limited`] (a provider's limits) and [`Route::outage`] (a window
/// of failures); [`Route::by_model`] chooses a route by the model the
/// request body names. They nest:
///
/// ```
/// use std::time::Duration;
/// use llm_retry_mock::{Reply, Route};
///
/// let secs = Duration::from_secs;
/// // 200 req/s with bursts of 10 (429 + exact Retry-After when empty),
/// // and nothing but 503 from 4 s to 7 s after the server started.
/// let route = Route::outage(
///     secs(4)..secs(7),
///     Reply::anthropic_error(503, "api_error", "Service unavailable"),
///     Route::capacity(200, 10, Reply::rate_limited(None), Route::always(Reply::anthropic_ok("hi"))),
/// );
/// # let _ = route;
/// ```
#[derive(Debug, Clone)]
pub struct Route {
    pub(crate) kind: RouteKind,
}

#[derive(Debug, Clone)]
pub(crate) enum RouteKind {
    /// A stateless choice by request number.
    Pick(Picker),
    /// A window of `during` replies in front of `otherwise`.
    Outage(Box<Outage>),
    /// A provider-shaped limit in front of `admitted`.
    Limited(Box<Limited>),
    /// A route per model named in the request body.
    ByModel(Box<ByModel>),
}

/// The nth reply of a sequence or a mix.
#[derive(Debug, Clone)]
pub(crate) enum Picker {
    Sequence {
        replies: Vec<Reply>,
        then: Option<Reply>,
    },
    Mix {
        choices: Vec<(u32, Reply)>,
        total: u64,
        /// Draw by this header's value and its attempt, not by arrival.
        per: Option<HeaderName>,
    },
}

/// See [`Route::limited`].
#[derive(Debug, Clone)]
pub(crate) struct Limited {
    pub(crate) limit: Limit,
    pub(crate) when_limited: Reply,
    pub(crate) admitted: Route,
}

/// See [`Route::by_model`].
#[derive(Debug, Clone)]
pub(crate) struct ByModel {
    pub(crate) models: Vec<(String, Route)>,
    pub(crate) otherwise: Route,
}

/// See [`Route::outage`].
#[derive(Debug, Clone)]
pub(crate) struct Outage {
    pub(crate) window: Range<Duration>,
    pub(crate) during: Reply,
    pub(crate) otherwise: Route,
}

impl Route {
    /// Every request gets `reply`.
    pub fn always(reply: Reply) -> Route {
        Route::sequence([reply])
    }

    /// The nth request to the route gets the nth reply; after the end, the
    /// last reply repeats.
    pub fn sequence(replies: impl IntoIterator<Item = Reply>) -> Route {
        Route {
            kind: RouteKind::Pick(Picker::Sequence {
                replies: replies.into_iter().collect(),
                then: None,
            }),
        }
    }

    /// The nth request gets the nth reply; every request after the end gets
    /// `then`.
    pub fn sequence_then(replies: impl IntoIterator<Item = Reply>, then: Reply) -> Route {
        Route {
            kind: RouteKind::Pick(Picker::Sequence {
                replies: replies.into_iter().collect(),
                then: Some(then),
            }),
        }
    }

    /// Each request gets a reply chosen at random with probability
    /// proportional to its weight. The choice for the nth request to the
    /// route depends only on the script's [`Script::seed`], the path and
    /// `n`, so a run is reproducible even when requests interleave
    /// differently. Zero-weight replies are never chosen, unless every
    /// weight is zero: then the choice is uniform.
    pub fn mix(weighted: impl IntoIterator<Item = (u32, Reply)>) -> Route {
        Route::mixed(weighted, None)
    }

    /// Like [`Route::mix`], but a request's draw depends on the value of
    /// its `header` and on how many requests with that value this route
    /// answered before (its attempt), not on its arrival order. Two runs
    /// that send the same logical requests (each tagged with its own id)
    /// draw the same reply for each request's nth attempt, however their
    /// sends interleave: a like-for-like comparison of two clients. A
    /// request without the header draws as [`Route::mix`] would.
    ///
    /// The route remembers the attempts of at most
    /// 65,536 values; past that it forgets them all and counts afresh.
    ///
    /// ```
    /// use http::HeaderName;
    /// use llm_retry_mock::{Reply, Route};
    ///
    /// // 15 % of the attempts of each `x-request-id` are refused.
    /// let route = Route::mix_per(
    ///     HeaderName::from_static("x-request-id"),
    ///     [(85, Reply::anthropic_ok("hi")), (15, Reply::rate_limited(None))],
    /// );
    /// # let _ = route;
    /// ```
    pub fn mix_per(header: HeaderName, weighted: impl IntoIterator<Item = (u32, Reply)>) -> Route {
        Route::mixed(weighted, Some(header))
    }

    fn mixed(weighted: impl IntoIterator<Item = (u32, Reply)>, per: Option<HeaderName>) -> Route {
        let choices: Vec<(u32, Reply)> = weighted.into_iter().collect();
        let total = choices.iter().map(|(w, _)| u64::from(*w)).sum();
        Route {
            kind: RouteKind::Pick(Picker::Mix {
                choices,
                total,
                per,
            }),
        }
    }

    /// An upstream with a capacity: a token bucket shared by every request
    /// to this route (on all connections) admits at most `per_second`
    /// requests per second on average, with bursts of up to `burst`.
    ///
    /// A request that finds a token is answered by `admitted`; one that
    /// does not gets `when_empty`, with the exact time until the next token
    /// added as `retry-after-ms` (milliseconds, rounded up) and
    /// `Retry-After` (whole seconds, rounded up, at least 1) — each only
    /// when `when_empty` does not already carry that header. With
    /// `per_second == 0` no next token ever comes and neither header is
    /// added.
    ///
    /// The bucket starts full when the server starts and refills
    /// continuously (exact integer arithmetic, no drift for any rate); a
    /// `burst` of 0 is taken as 1. The token is taken when the request's
    /// body has arrived, before any [`Reply::delay`]. Refused requests do not
    /// advance `admitted`'s counter: the nth *admitted* request gets
    /// `admitted`'s nth reply. Time is the tokio clock, so a paused-clock
    /// test drives it. Each [`MockServer`](crate::MockServer) has its own
    /// bucket; [`MockServer::reset_records`](crate::MockServer::reset_records)
    /// does not refill it.
    ///
    /// ```
    /// use llm_retry_mock::{Reply, Route};
    ///
    /// // 100 req/s, bursts of 5; beyond that, Anthropic's 429.
    /// let route = Route::capacity(
    ///     100,
    ///     5,
    ///     Reply::rate_limited(None),
    ///     Route::always(Reply::anthropic_ok("hi")),
    /// );
    /// # let _ = route;
    /// ```
    pub fn capacity(per_second: u32, burst: u32, when_empty: Reply, admitted: Route) -> Route {
        Route {
            kind: RouteKind::Limited(Box::new(Limited {
                limit: Limit::new(crate::Quota::Bucket {
                    per_second: u64::from(per_second),
                    burst: u64::from(burst),
                }),
                when_limited: when_empty,
                admitted,
            })),
        }
    }

    /// An outage: every request that arrives within `window` — a time range
    /// measured from the moment the server started
    /// ([`MockServer::started_at`](crate::MockServer::started_at)), start
    /// included, end excluded — gets `during` (typically a `503`); every
    /// other request is answered by `otherwise`.
    ///
    /// Requests inside the window never reach `otherwise`: they advance no
    /// counter and take no [`Route::capacity`] token. An empty or inverted
    /// window never matches. Time is the tokio clock, so a paused-clock test
    /// drives it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_retry_mock::{Reply, Route};
    ///
    /// // 503 from 2 s to 5 s after start, 200 otherwise.
    /// let route = Route::outage(
    ///     Duration::from_secs(2)..Duration::from_secs(5),
    ///     Reply::anthropic_error(503, "api_error", "Service unavailable"),
    ///     Route::always(Reply::anthropic_ok("hi")),
    /// );
    /// # let _ = route;
    /// ```
    pub fn outage(window: Range<Duration>, during: Reply, otherwise: Route) -> Route {
        Route {
            kind: RouteKind::Outage(Box::new(Outage {
                window,
                during,
                otherwise,
            })),
        }
    }
}

impl Route {
    /// An upstream limited the way a provider limits an API key: a request
    /// quota, optionally a token quota and a ceiling on requests in flight,
    /// each stated in every answer's headers in the [`Shape`](crate::Shape)
    /// of one provider ([`Limit`]).
    ///
    /// A request over the in-flight ceiling gets `529 overloaded_error`
    /// with no wait. One the quotas cannot admit gets `when_limited` with
    /// the shape's rate-limit headers and its wait headers for the time
    /// until both quotas admit it (none when its token cost exceeds what
    /// the token quota ever holds). One admitted is answered by `admitted`,
    /// with the shape's rate-limit headers added. Quota units are taken
    /// when the request's body has arrived; a request is in flight from
    /// then until its reply's delays are over. Each
    /// [`MockServer`](crate::MockServer) has its own limits; time is the
    /// tokio clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_retry_mock::{Limit, Quota, Reply, Route, Shape};
    ///
    /// // Azure-shaped: 600 requests per minute window.
    /// let route = Route::limited(
    ///     Limit::new(Quota::Window { limit: 600, length: Duration::from_secs(60) })
    ///         .shape(Shape::Azure),
    ///     Reply::rate_limited(None),
    ///     Route::always(Reply::openai_ok("hi")),
    /// );
    /// # let _ = route;
    /// ```
    pub fn limited(limit: Limit, when_limited: Reply, admitted: Route) -> Route {
        Route {
            kind: RouteKind::Limited(Box::new(Limited {
                limit,
                when_limited,
                admitted,
            })),
        }
    }

    /// One key, limited per model, the way providers limit each model
    /// separately: a request whose JSON body names `"model": m` is answered
    /// by the route paired with `m` (the first pair, if `m` is listed
    /// twice); every other request — another model, no `model` field, a
    /// `model` that is not a string, a body that is not JSON — by
    /// `otherwise`.
    ///
    /// Each model's route keeps its own state (counters, limits), so a
    /// [`Route::limited`] under one model never refuses another model's
    /// requests. The body is read as it arrived, never more than
    /// [`Script::max_request_body`]; a body that cannot be parsed is not an
    /// error, it goes to `otherwise`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_retry_mock::{Limit, Quota, Reply, Route};
    ///
    /// // claude-opus-4-5 is refused until 5 s after the start (each 429
    /// // names the wait to then), and served after; every other model is
    /// // always served.
    /// let held = Limit::new(Quota::Window { limit: 1_000_000, length: Duration::from_secs(5) })
    ///     .first_window_spent();
    /// let ok = Route::always(Reply::anthropic_ok("hi"));
    /// let route = Route::by_model(
    ///     [("claude-opus-4-5", Route::limited(held, Reply::rate_limited(None), ok.clone()))],
    ///     ok,
    /// );
    /// # let _ = route;
    /// ```
    pub fn by_model<M: Into<String>>(
        models: impl IntoIterator<Item = (M, Route)>,
        otherwise: Route,
    ) -> Route {
        Route {
            kind: RouteKind::ByModel(Box::new(ByModel {
                models: models
                    .into_iter()
                    .map(|(model, route)| (model.into(), route))
                    .collect(),
                otherwise,
            })),
        }
    }
}

impl Picker {
    /// The header whose value (and attempt) draws the reply, if any.
    pub(crate) fn per(&self) -> Option<&HeaderName> {
        match self {
            Picker::Mix { per, .. } => per.as_ref(),
            Picker::Sequence { .. } => None,
        }
    }

    /// The reply for the `nth` (0-based) request; `salt` separates routes.
    pub(crate) fn pick(&self, nth: u64, seed: u64, salt: u64) -> Option<&Reply> {
        match self {
            Picker::Sequence { replies, then } => {
                let nth = usize::try_from(nth).unwrap_or(usize::MAX);
                replies
                    .get(nth)
                    .or(then.as_ref())
                    .or_else(|| replies.last())
            }
            Picker::Mix { choices, total, .. } => {
                let roll = splitmix64(splitmix64(seed ^ salt) ^ nth);
                if *total == 0 {
                    let len = u64::try_from(choices.len()).ok().filter(|l| *l > 0)?;
                    let i = usize::try_from(roll % len).ok()?;
                    return choices.get(i).map(|(_, r)| r);
                }
                let mut point = roll % total;
                for (weight, reply) in choices {
                    let weight = u64::from(*weight);
                    if point < weight {
                        return Some(reply);
                    }
                    point -= weight;
                }
                None
            }
        }
    }
}

/// SplitMix64: a tiny, portable, well-mixed 64-bit hash.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a over the path: a stable per-route salt.
pub(crate) fn path_salt(path: &str) -> u64 {
    fnv1a(path.as_bytes())
}

/// FNV-1a: a stable hash of a few bytes.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stateless choice of a plain route.
    fn pick(route: &Route, nth: u64, seed: u64, salt: u64) -> Option<&Reply> {
        match &route.kind {
            RouteKind::Pick(picker) => picker.pick(nth, seed, salt),
            _ => panic!("not a plain route"),
        }
    }

    fn code(reply: Option<&Reply>) -> u16 {
        match reply {
            Some(Reply::Response(r)) => r.status().as_u16(),
            Some(Reply::ResetBeforeHeaders { .. }) => 0,
            None => 1,
        }
    }

    #[test]
    fn sequence_repeats_last() {
        let route = Route::sequence([Reply::status(500), Reply::status(200)]);
        let got: Vec<u16> = (0..4).map(|n| code(pick(&route, n, 0, 0))).collect();
        assert_eq!(got, [500, 200, 200, 200]);
        assert_eq!(code(pick(&route, u64::MAX, 0, 0)), 200);
    }

    #[test]
    fn sequence_then_and_empty() {
        let route = Route::sequence_then([Reply::status(503)], Reply::status(201));
        let got: Vec<u16> = (0..3).map(|n| code(pick(&route, n, 0, 0))).collect();
        assert_eq!(got, [503, 201, 201]);
        assert_eq!(code(pick(&Route::sequence([]), 0, 0, 0)), 1);
        assert_eq!(
            code(pick(&Route::sequence_then([], Reply::status(204)), 5, 0, 0)),
            204
        );
        assert_eq!(code(pick(&Route::mix([]), 0, 0, 0)), 1);
    }

    #[test]
    fn mix_is_seeded_and_weighted() {
        let route = Route::mix([
            (3, Reply::status(200)),
            (1, Reply::status(529)),
            (0, Reply::status(418)),
        ]);
        let run = |seed| -> Vec<u16> { (0..400).map(|n| code(pick(&route, n, seed, 9))).collect() };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        let got = run(1);
        let ok = got.iter().filter(|c| **c == 200).count();
        assert!(!got.contains(&418));
        assert!((240..=360).contains(&ok), "{ok} of 400 should be ~300");
    }

    #[test]
    fn all_zero_weights_are_uniform() {
        let route = Route::mix([(0, Reply::status(200)), (0, Reply::status(500))]);
        let got: Vec<u16> = (0..100).map(|n| code(pick(&route, n, 3, 0))).collect();
        assert!(got.contains(&200) && got.contains(&500));
    }

    #[test]
    fn route_replaces_same_path() {
        let script = Script::new()
            .route("/a", Route::always(Reply::status(500)))
            .route("/a", Route::always(Reply::status(200)));
        assert_eq!(script.routes.len(), 1);
        assert_eq!(code(pick(&script.routes[0].1, 0, 0, 0)), 200);
    }
}
