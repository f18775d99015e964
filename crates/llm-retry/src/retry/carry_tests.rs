//! How requests carry their gate link: in the extensions only until the
//! stack showed it needs them there.
#![allow(clippy::unwrap_used)]

use crate::rate_limit::link::GateLink;
use crate::rate_limit::{Quotas, RateLimitLayer};
use crate::{RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// Per request that reached it: its path, whether it carried a link in its
/// extensions, and when it came.
type Seen = Arc<Mutex<Vec<(String, bool, Instant)>>>;

/// An upstream recording what reaches it; `/busy` answers 429 with
/// `retry-after: 2`.
type Answer = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Response<Full<Bytes>>, crate::BoxError>> + Send>,
>;

fn upstream<B: Send + 'static>(
    seen: Seen,
) -> tower::util::ServiceFn<impl FnMut(Request<B>) -> Answer + Clone> {
    tower::service_fn(move |req: Request<B>| -> Answer {
        let seen = Arc::clone(&seen);
        Box::pin(async move {
            let linked = req.extensions().get::<GateLink>().is_some();
            let path = req.uri().path().to_owned();
            seen.lock()
                .unwrap()
                .push((path.clone(), linked, Instant::now()));
            let mut res = Response::new(Full::new(Bytes::new()));
            if path == "/busy" {
                *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                res.headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static("2"));
            }
            Ok::<_, crate::BoxError>(res)
        })
    })
}

fn retry<S>(inner: S) -> crate::Retry<S> {
    let policy = RetryPolicy::builder()
        .max_retries(0)
        .no_budget()
        .build()
        .unwrap();
    RetryLayer::new(policy).layer(inner)
}

/// `inner` behind a gate with no quota of its own (it learns from
/// answers alone).
fn gated<S>(inner: S) -> crate::rate_limit::RateLimit<S> {
    RateLimitLayer::new(Quotas::none()).unwrap().layer(inner)
}

async fn send<S, B>(svc: &S, path: &str) -> StatusCode
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = crate::BoxError> + Clone,
{
    let request = Request::post(format!("http://a.test{path}"))
        .body(Full::default())
        .unwrap();
    svc.clone().oneshot(request).await.unwrap().status()
}

/// Sends `/first`, then `/busy` (a 429 naming 2 s) and `/next`: the gate
/// must hold the key for the 429's wait, which it learns only through the
/// request's link.
async fn the_key_is_held_after_a_429<S, B>(svc: &S, seen: &Seen)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = crate::BoxError> + Clone,
{
    assert_eq!(send(svc, "/first").await, StatusCode::OK);
    let start = Instant::now();
    assert_eq!(send(svc, "/busy").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(send(svc, "/next").await, StatusCode::OK);
    let next = seen.lock().unwrap()[2].2;
    assert_eq!(next - start, Duration::from_secs(2), "the key was held");
}

fn linked(seen: &Seen) -> Vec<bool> {
    seen.lock().unwrap().iter().map(|(_, l, _)| *l).collect()
}

#[tokio::test(start_paused = true)]
async fn a_gate_reached_during_the_call_gets_the_link_without_extensions() {
    let seen = Seen::default();
    let gate = gated(upstream(seen.clone()));
    let svc = retry(gate);
    // The 429's wait reached the gate through the offered link.
    the_key_is_held_after_a_429(&svc, &seen).await;
    assert_eq!(linked(&seen), [true, false, false]);
}

#[tokio::test(start_paused = true)]
async fn requests_that_meet_no_gate_carry_no_extension_after_the_first() {
    let seen = Seen::default();
    let svc = retry(upstream(seen.clone()));
    for _ in 0..3 {
        assert_eq!(send(&svc, "/ok").await, StatusCode::OK);
    }
    // Clones share what the first request showed.
    assert_eq!(send(&svc.clone(), "/ok").await, StatusCode::OK);
    assert_eq!(linked(&seen), [true, false, false, false]);
}

/// A layer told there is no gate below, retrying nothing.
fn no_gate_below() -> RetryLayer {
    let policy = RetryPolicy::builder()
        .max_retries(0)
        .no_budget()
        .build()
        .unwrap();
    RetryLayer::new(policy).no_gate_below()
}

#[tokio::test(start_paused = true)]
async fn stacks_made_per_request_under_a_layer_told_there_is_no_gate_carry_no_link() {
    let seen = Seen::default();
    let layer = no_gate_below();
    for _ in 0..3 {
        // A stack made for each request, as a client middleware makes it.
        let svc = layer.layer(upstream(seen.clone()));
        assert_eq!(send(&svc, "/ok").await, StatusCode::OK);
    }
    assert_eq!(linked(&seen), [false, false, false]);
}

#[tokio::test(start_paused = true)]
async fn a_gate_below_a_layer_told_there_is_none_hears_from_the_next_request_on() {
    let seen = Seen::default();
    let svc = no_gate_below().layer(gated(upstream(seen.clone())));
    // The first request finds the gate unannounced; from the next on the
    // 429's wait reaches it through the link.
    assert_eq!(send(&svc, "/unannounced").await, StatusCode::OK);
    let start = Instant::now();
    assert_eq!(send(&svc, "/busy").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(send(&svc, "/next").await, StatusCode::OK);
    let next = seen.lock().unwrap().last().unwrap().2;
    assert_eq!(next - start, Duration::from_secs(2), "the key was held");
}

/// Calls its inner service from a task of its own, as a buffer's worker
/// does (the gate tests' `Deferred` calls it later on the same task, which
/// the offer reaches).
#[derive(Clone)]
struct Deferred<S>(S);

impl<S, R> Service<R> for Deferred<S>
where
    S: Service<R, Error = crate::BoxError> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: R) -> Self::Future {
        let mut inner = self.0.clone();
        let worker = tokio::spawn(async move { inner.ready().await?.call(request).await });
        Box::pin(async move { worker.await? })
    }
}

#[tokio::test(start_paused = true)]
async fn a_gate_on_another_task_keeps_getting_the_link_in_extensions() {
    let seen = Seen::default();
    let gate = gated(upstream(seen.clone()));
    let svc = retry(Deferred(gate));
    the_key_is_held_after_a_429(&svc, &seen).await;
    assert_eq!(linked(&seen), [true, true, true]);
}

#[tokio::test(start_paused = true)]
async fn a_gate_under_a_gate_gets_the_link_when_the_first_calls_it() {
    let seen = Seen::default();
    let layer = RateLimitLayer::new(Quotas::none()).unwrap();
    let svc = retry(layer.layer(layer.layer(upstream(seen.clone()))));
    the_key_is_held_after_a_429(&svc, &seen).await;
    assert_eq!(linked(&seen), [true, false, false]);
}

/// A retry layer that resends once.
fn retrying_once<S>(inner: S) -> crate::Retry<S> {
    let policy = RetryPolicy::builder()
        .max_retries(1)
        .no_budget()
        .build()
        .unwrap();
    RetryLayer::new(policy).layer(inner)
}

#[tokio::test(start_paused = true)]
async fn a_gate_takes_the_nearest_retry_layers_link_not_an_outer_ones() {
    // The outer layer reaches its gate from another task, so its requests
    // carry its link in their extensions; the inner layer offers its own,
    // and takes the outer one off its first send and its resends alike, so
    // its gate cannot read it.
    let seen = Seen::default();
    let lower = gated(upstream(seen.clone()));
    let upper = gated(retrying_once(lower));
    let svc = retry(Deferred(upper));
    for _ in 0..3 {
        assert_eq!(send(&svc, "/ok").await, StatusCode::OK);
    }
    // A 429 the inner layer resends once.
    assert_eq!(send(&svc, "/busy").await, StatusCode::TOO_MANY_REQUESTS);
    // The first carries the inner layer's own link (its probe), the rest
    // none: never the outer one.
    assert_eq!(linked(&seen), [true, false, false, false, false]);
}

#[tokio::test(start_paused = true)]
async fn a_gate_under_a_gate_knows_the_requests_deadline() {
    // The lower gate paces one send a second; a request with half a second
    // left is refused at once, which only a gate that has the request's
    // link can know.
    let seen = Seen::default();
    let lower = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(60, 1))
        .unwrap()
        .layer(upstream(seen.clone()));
    let upper = gated(lower);
    let policy = RetryPolicy::builder()
        .max_retries(0)
        .max_elapsed(Duration::from_millis(500))
        .no_budget()
        .build()
        .unwrap();
    let svc = RetryLayer::new(policy).layer(upper);
    assert_eq!(send(&svc, "/first").await, StatusCode::OK);
    let start = Instant::now();
    let request = Request::post("http://a.test/second")
        .body(Full::default())
        .unwrap();
    let refused = svc.clone().oneshot(request).await;
    assert!(refused.is_err(), "refused for its deadline");
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_gate_under_a_tower_retry_path_hears_that_paths_news_not_the_outer_layers() {
    // A retry layer over tower's retry loop (with the same policy) over a
    // gate: the gate is reached while the outer layer offers its link, but
    // the tower path's resends carry their own, and it is that path which
    // judges each answer. Its second 429 (about 2 s in) holds the key for
    // 2 s, so another request at 2.5 s waits for the hold.
    let seen = Seen::default();
    let gate = gated(upstream(seen.clone()));
    let inner = RetryPolicy::builder()
        .max_retries(2)
        .seed(3)
        .no_budget()
        .build()
        .unwrap();
    let svc = retry(tower::retry::RetryLayer::new(inner).layer(gate));
    let start = Instant::now();
    let busy = send(&svc, "/busy");
    let later = async {
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        send(&svc, "/next").await
    };
    let (busy, later) = tokio::join!(busy, later);
    assert_eq!(busy, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(later, StatusCode::OK);
    let seen = seen.lock().unwrap();
    let busy: Vec<Duration> = seen
        .iter()
        .filter(|(path, ..)| path == "/busy")
        .map(|(.., at)| *at - start)
        .collect();
    assert_eq!(busy.len(), 3, "{busy:?}");
    let next = seen
        .iter()
        .find(|(path, ..)| path == "/next")
        .map(|(.., at)| *at - start)
        .unwrap();
    assert_eq!(
        next,
        busy[1] + Duration::from_secs(2),
        "held from the second 429"
    );
}

/// Sends `/free` to `free` and every other path to `gated`, as a `Steer`
/// with a gate on one branch.
#[derive(Clone)]
struct ByPath<A, B> {
    free: A,
    gated: B,
}

impl<A, B, R, Res> Service<Request<R>> for ByPath<A, B>
where
    A: Service<Request<R>, Response = Res, Error = crate::BoxError>,
    B: Service<Request<R>, Response = Res, Error = crate::BoxError>,
    A::Future: Send + 'static,
    B::Future: Send + 'static,
{
    type Response = Res;
    type Error = crate::BoxError;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Res, crate::BoxError>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), crate::BoxError>> {
        // Both branches here are always ready.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<R>) -> Self::Future {
        if request.uri().path() == "/free" {
            Box::pin(self.free.call(request))
        } else {
            Box::pin(self.gated.call(request))
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_gate_met_after_requests_that_met_none_gets_the_link_again() {
    let seen = Seen::default();
    let gate = gated(upstream(seen.clone()));
    let svc = retry(ByPath {
        free: upstream(seen.clone()),
        gated: gate,
    });
    // The first request meets no gate: the next go without the link...
    assert_eq!(send(&svc, "/free").await, StatusCode::OK);
    // ...until one meets the gate, which asks for it; the one after
    // settles again, and the gate hears what its 429 meant.
    assert_eq!(send(&svc, "/first").await, StatusCode::OK);
    let start = Instant::now();
    assert_eq!(send(&svc, "/busy").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(send(&svc, "/next").await, StatusCode::OK);
    let next = seen.lock().unwrap()[3].2;
    assert_eq!(next - start, Duration::from_secs(2), "the key was held");
    assert_eq!(linked(&seen), [true, false, true, false]);
}

#[tokio::test(start_paused = true)]
async fn a_client_layer_s_requests_reach_its_gate_by_the_offer_from_the_first() {
    let seen = Seen::default();
    let policy = RetryPolicy::builder()
        .max_retries(0)
        .no_budget()
        .build()
        .unwrap();
    // Its gate sits right under its retry loop: no request needs the link
    // in its extensions, not even the first, and the gate still hears the
    // 429's wait.
    let svc = crate::ClientLayer::new(policy).layer(upstream(seen.clone()));
    the_key_is_held_after_a_429(&svc, &seen).await;
    assert_eq!(linked(&seen), [false, false, false]);
}

/// Records whether each request carries a link in its extensions.
fn recording<S, B>(
    carried: Arc<Mutex<Vec<bool>>>,
    inner: S,
) -> tower::util::MapRequest<S, impl FnMut(Request<B>) -> Request<B> + Clone> {
    tower::util::MapRequest::new(inner, move |req: Request<B>| {
        let linked = req.extensions().get::<GateLink>().is_some();
        carried.lock().unwrap().push(linked);
        req
    })
}

#[tokio::test(start_paused = true)]
async fn an_outer_loop_over_a_loop_with_a_gate_settles_once() {
    let seen = Seen::default();
    let outer_links = Arc::new(Mutex::new(Vec::new()));
    let gate = gated(upstream(seen.clone()));
    // The gate takes the inner loop's offer: the outer loop met no gate
    // of its own, and stays settled so.
    let svc = retry(recording(outer_links.clone(), retry(gate)));
    for _ in 0..6 {
        assert_eq!(send(&svc, "/ok").await, StatusCode::OK);
    }
    assert_eq!(
        *outer_links.lock().unwrap(),
        [true, false, false, false, false, false]
    );
}

#[tokio::test(start_paused = true)]
async fn a_loop_that_offers_nothing_hides_an_outer_loop_s_offer() {
    let seen = Seen::default();
    let inner_gate = gated(upstream(seen.clone()));
    let inner = retry(ByPath {
        free: upstream(seen.clone()),
        gated: inner_gate,
    });
    let svc = retry(gated(inner));
    // The inner loop settles on no gate; the outer loop's gate is its
    // own and hears its 429, which a gate under the inner loop must not
    // take as its own.
    assert_eq!(send(&svc, "/free").await, StatusCode::OK);
    assert_eq!(send(&svc, "/free").await, StatusCode::OK);
    let start = Instant::now();
    assert_eq!(send(&svc, "/busy").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(send(&svc, "/free").await, StatusCode::OK);
    let next = seen.lock().unwrap()[3].2;
    assert_eq!(
        next - start,
        Duration::from_secs(2),
        "the outer gate held the key"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_that_finds_a_gate_unannounced_resends_with_the_body_it_keys_by() {
    let seen = Seen::default();
    // Reads each body to its end before answering, as a client sends it.
    let reading = {
        let seen = seen.clone();
        tower::service_fn(move |request: Request<crate::ReplayBody<Full<Bytes>>>| {
            let answer = upstream(seen.clone());
            async move {
                use http_body_util::BodyExt;
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await?.to_bytes();
                answer
                    .oneshot(Request::from_parts(parts, Full::new(bytes)))
                    .await
            }
        })
    };
    let gate = gated(reading);
    let svc = retrying_once(ByPath {
        free: upstream(seen.clone()),
        gated: gate,
    });
    let post = |path: &str, model: &str| {
        Request::post(format!("http://a.test{path}"))
            .body(Full::new(Bytes::from(format!(r#"{{"model":"{model}"}}"#))))
            .unwrap()
    };
    let status = |svc: &crate::Retry<_>, request| {
        let svc = svc.clone();
        async move { svc.oneshot(request).await.unwrap().status() }
    };
    // Settled on no gate; then a request meets one: its resend goes with
    // the link and the body, so the 429 holds its model's key.
    assert_eq!(status(&svc, post("/free", "m1")).await, StatusCode::OK);
    assert_eq!(
        status(&svc, post("/busy", "m1")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let start = Instant::now();
    assert_eq!(status(&svc, post("/next", "m1")).await, StatusCode::OK);
    let next = seen.lock().unwrap().last().unwrap().2;
    assert_eq!(
        next - start,
        Duration::from_secs(2),
        "the model's key was held"
    );
}
