//! Which reply each request gets: sequences, mixes, fallback, 404.
#![allow(clippy::unwrap_used)]

mod common;

use common::{client, fetch, send, start};
use http::Method;
use llm_retry_mock::{Reply, Route, Script};

#[tokio::test]
async fn sequence_in_order_then_last_repeats() {
    let server = start(Script::new().route(
        "/v1/messages",
        Route::sequence([
            Reply::overloaded(),
            Reply::rate_limited(None),
            Reply::anthropic_ok("hi"),
        ]),
    ))
    .await;
    let client = client();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(fetch(&client, &server.url("/v1/messages")).await.0);
    }
    assert_eq!(statuses, [529, 429, 200, 200, 200]);
    assert_eq!(server.requests_to("/v1/messages"), 5);
}

#[tokio::test]
async fn sequence_then_and_query_is_ignored_for_routing() {
    let server = start(Script::new().route(
        "/x",
        Route::sequence_then([Reply::status(500), Reply::status(502)], Reply::status(204)),
    ))
    .await;
    let client = client();
    let mut statuses = Vec::new();
    for i in 0..4 {
        statuses.push(fetch(&client, &server.url(&format!("/x?try={i}"))).await.0);
    }
    assert_eq!(statuses, [500, 502, 204, 204]);
    assert!(server.requests().iter().all(|r| r.path == "/x"));
}

#[tokio::test]
async fn routes_count_independently_per_server() {
    let script = Script::new()
        .route(
            "/a",
            Route::sequence([Reply::status(500), Reply::status(200)]),
        )
        .route(
            "/b",
            Route::sequence([Reply::status(503), Reply::status(201)]),
        );
    let client = client();
    for _ in 0..2 {
        let server = start(script.clone()).await;
        assert_eq!(fetch(&client, &server.url("/a")).await.0, 500);
        assert_eq!(fetch(&client, &server.url("/b")).await.0, 503);
        assert_eq!(fetch(&client, &server.url("/a")).await.0, 200);
        assert_eq!(fetch(&client, &server.url("/b")).await.0, 201);
    }
}

async fn mix_run(seed: u64) -> Vec<u16> {
    let route = Route::mix([
        (2, Reply::status(200)),
        (1, Reply::status(529)),
        (1, Reply::status(503)),
    ]);
    let server = start(Script::new().seed(seed).route("/m", route)).await;
    let client = client();
    let mut statuses = Vec::new();
    for _ in 0..60 {
        statuses.push(fetch(&client, &server.url("/m")).await.0);
    }
    statuses
}

#[tokio::test]
async fn mix_is_deterministic_per_seed() {
    let first = mix_run(42).await;
    assert_eq!(first, mix_run(42).await);
    assert_ne!(first, mix_run(43).await);
    for code in [200, 529, 503] {
        assert!(first.contains(&code), "{code} never chosen in {first:?}");
    }
}

#[tokio::test]
async fn unknown_path_is_404_json_and_recorded() {
    let server = start(Script::new().route("/known", Route::always(Reply::status(200)))).await;
    let (status, body) = fetch(&client(), &server.url("/unknown")).await;
    assert_eq!(status, 404);
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["type"], "error");
    assert_eq!(json["error"]["type"], "not_found_error");
    assert_eq!(server.requests_to("/unknown"), 1);
}

#[tokio::test]
async fn fallback_answers_unrouted_paths() {
    let server = start(
        Script::new()
            .route("/known", Route::always(Reply::status(201)))
            .fallback(Route::sequence([Reply::status(418), Reply::status(200)])),
    )
    .await;
    let client = client();
    assert_eq!(fetch(&client, &server.url("/a")).await.0, 418);
    assert_eq!(fetch(&client, &server.url("/known")).await.0, 201);
    assert_eq!(fetch(&client, &server.url("/b")).await.0, 200);
}

#[tokio::test]
async fn empty_route_is_500() {
    let server = start(Script::new().route("/e", Route::sequence([]))).await;
    assert_eq!(fetch(&client(), &server.url("/e")).await.0, 500);
}

#[tokio::test]
async fn by_model_answers_each_model_by_its_own_route() {
    let server = start(Script::new().route(
        "/v1/messages",
        Route::by_model(
            [(
                "held",
                Route::sequence([Reply::rate_limited(Some(1)), Reply::anthropic_ok("late")]),
            )],
            Route::always(Reply::anthropic_ok("free")),
        ),
    ))
    .await;
    let client = client();
    let url = server.url("/v1/messages");
    let mut statuses = Vec::new();
    for body in [
        r#"{"model":"held","max_tokens":8}"#,
        r#"{"model":"free","max_tokens":8}"#,
        r#"{"model":"held","max_tokens":8}"#,
        "not json",
    ] {
        let response = send(&client, Method::POST, &url, body).await.unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [429, 200, 200, 200]);
    assert_eq!(server.requests_to("/v1/messages"), 4);
}
