//! Concurrency, shutdown and drop.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{client, fetch, get, start, wait_until};
use http_body_util::BodyExt;
use llm_retry_mock::{MockServer, Reply, Route, Script};
use tokio::net::TcpStream;

/// More connects at once than tokio's default backlog of 128, made while
/// the accept loop cannot run (this test holds the runtime's one thread):
/// each waits in the kernel's queue. With the default backlog the SYNs
/// beyond it are dropped and those connects time out.
#[tokio::test]
async fn a_burst_of_connects_waits_in_the_backlog() {
    let server = start(Script::new()).await;
    let connected: Vec<std::net::TcpStream> = (0..300)
        .map(|n| {
            std::net::TcpStream::connect_timeout(&server.addr(), Duration::from_secs(2))
                .unwrap_or_else(|error| panic!("connect {n} was dropped: {error}"))
        })
        .collect();
    assert_eq!(connected.len(), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_concurrent_connections() {
    const N: usize = 256;
    let server = start(Script::new().route(
        "/v1/messages",
        Route::always(Reply::anthropic_stream(&["a", "b"]).delay(Duration::from_millis(50))),
    ))
    .await;
    let want = Reply::anthropic_stream(&["a", "b"])
        .expected_body()
        .unwrap();
    let client = client();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..N {
        let client = client.clone();
        let url = server.url("/v1/messages");
        tasks.spawn(async move {
            let response = get(&client, &url).await.unwrap();
            response.into_body().collect().await.unwrap().to_bytes()
        });
    }
    while let Some(body) = tasks.join_next().await {
        assert_eq!(body.unwrap(), want);
    }
    assert_eq!(server.request_count(), N);
}

#[tokio::test]
async fn shutdown_ends_in_flight_requests_and_stops_accepting() {
    let server = start(
        Script::new()
            .route(
                "/hang",
                Route::always(Reply::status(200).delay(Duration::from_secs(3600))),
            )
            .route("/ok", Route::always(Reply::status(200))),
    )
    .await;
    let addr = server.addr();
    let client = client();
    assert_eq!(fetch(&client, &server.url("/ok")).await.0, 200);
    let url = server.url("/hang");
    let pending = tokio::spawn({
        let client = client.clone();
        async move { get(&client, &url).await.map(|r| r.status()) }
    });
    assert!(wait_until(2000, || server.requests_to("/hang") == 1).await);

    server.shutdown().await;
    assert!(
        pending.await.unwrap().is_err(),
        "in-flight request must fail"
    );
    assert!(TcpStream::connect(addr).await.is_err(), "listener closed");
}

#[tokio::test]
async fn drop_stops_everything() {
    let server: MockServer = start(Script::new().fallback(Route::always(
        Reply::status(200).delay(Duration::from_secs(3600)),
    )))
    .await;
    let addr = server.addr();
    let client = client();
    let url = server.url("/");
    let pending = tokio::spawn({
        let client = client.clone();
        async move { get(&client, &url).await.map(|r| r.status()) }
    });
    assert!(wait_until(2000, || server.request_count() == 1).await);
    drop(server);
    assert!(
        pending.await.unwrap().is_err(),
        "in-flight request must fail"
    );
    let refused = async {
        for _ in 0..200 {
            if TcpStream::connect(addr).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    };
    assert!(refused.await, "listener closed after drop");
}

#[tokio::test]
async fn url_joins_paths() {
    let server = start(Script::new()).await;
    let base = format!("http://{}", server.addr());
    assert!(base.starts_with("http://127.0.0.1:"));
    assert_eq!(server.url(""), base);
    assert_eq!(server.url("/v1/messages"), format!("{base}/v1/messages"));
    assert_eq!(server.url("v1"), format!("{base}/v1"));
    assert_eq!(server.url("?q=1"), format!("{base}?q=1"));
    assert!(format!("{server:?}").contains("MockServer"));
}
