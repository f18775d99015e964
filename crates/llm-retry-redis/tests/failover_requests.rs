//! Two failovers (two replicas) in front of the same upstreams, their
//! marks shared through a real Redis: a wait named to one replica keeps the
//! other from sending to that target at all.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::failover::{Failover, FailoverReport, MarkKind, SharedMarks, Target};
use llm_retry::BoxError;
use llm_retry_mock::{MockServer, Reply, Route, Script};
use llm_retry_redis::{RedisTargetMarks, SharedOptions, StateName};
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;
use tower::util::BoxCloneSyncService;
use tower::ServiceExt;

type Svc = BoxCloneSyncService<Request<Full<Bytes>>, Response<Incoming>, BoxError>;

const PATH: &str = "/v1/messages";

fn target(name: &str, upstream: &MockServer) -> Target<Svc> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let service = BoxCloneSyncService::new(client.map_err(BoxError::from));
    let base = upstream.url("");
    Target::new(name, service).rewrite(move |parts, _| {
        parts.uri = format!("{base}{}", parts.uri.path()).parse()?;
        Ok(())
    })
}

fn request() -> Request<Full<Bytes>> {
    Request::post(format!("http://failover.invalid{PATH}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(br#"{"model":"claude"}"#)))
        .unwrap()
}

/// One replica: its own store on the shared Redis, `a` cooling down on a
/// named wait and sharing it, then `b`.
fn replica(
    redis: &RedisServer,
    a: &MockServer,
    b: &MockServer,
) -> (Failover<Svc>, RedisTargetMarks) {
    let options = SharedOptions::default()
        .with_timeout(Duration::from_secs(2))
        .with_sync_interval(Duration::from_secs(3600));
    let store =
        RedisTargetMarks::start(redis.client(), StateName::new("gateway").unwrap(), options)
            .unwrap();
    let marks: Arc<dyn SharedMarks> = Arc::new(store.clone());
    let failover = Failover::builder(vec![
        target("a", a).cooldown().shared_marks(marks),
        target("b", b),
    ])
    .build()
    .unwrap();
    (failover, store)
}

#[tokio::test]
async fn a_wait_named_to_one_replica_keeps_the_other_off_the_target() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let a = MockServer::start(
        Script::new().route(
            PATH,
            Route::always(
                Reply::anthropic_error(429, "rate_limit_error", "Rate limited")
                    .header("retry-after", "30"),
            ),
        ),
    )
    .await
    .unwrap();
    let b = MockServer::start(Script::new().route(PATH, Route::always(Reply::anthropic_ok("b"))))
        .await
        .unwrap();
    let (first, first_marks) = replica(&redis, &a, &b);
    let (second, second_marks) = replica(&redis, &a, &b);

    assert_eq!(first.oneshot(request()).await.unwrap().status(), 200);
    assert_eq!(a.request_count(), 1);
    assert!(first_marks.sync().await && second_marks.sync().await);

    let response = second.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 200);
    let report = response
        .extensions()
        .get::<FailoverReport>()
        .cloned()
        .unwrap();
    assert_eq!(
        report.set_aside().collect::<Vec<_>>(),
        [("a", MarkKind::Cooldown)]
    );
    assert_eq!(a.request_count(), 1, "the second replica never sent to a");
    assert_eq!(b.request_count(), 2);
}
