//! What the server records: method, path, headers, full body, timing; the
//! request-body cap.
#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::{client, fetch, send, start};
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use llm_retry_mock::{Reply, Route, Script};

#[tokio::test]
async fn records_method_path_headers_and_a_2_mib_body() {
    let server =
        start(Script::new().route("/v1/messages", Route::always(Reply::anthropic_ok("ok")))).await;
    let body: Bytes = (0..2 * 1024 * 1024)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    let request = Request::post(server.url("/v1/messages?beta=true"))
        .header("x-api-key", "sk-test")
        .header("anthropic-version", "2023-06-01")
        .header("x-binary", &b"\xfe\xff"[..])
        .body(Full::new(body.clone()))
        .unwrap();
    let response = client().request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    response.into_body().collect().await.unwrap();

    let recorded = server.requests();
    assert_eq!(recorded.len(), 1);
    let r = &recorded[0];
    assert_eq!(r.method, Method::POST);
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header_str("x-api-key"), Some("sk-test"));
    assert_eq!(r.header_str("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.headers["x-binary"].as_bytes(), b"\xfe\xff");
    assert_eq!(r.body.len(), body.len());
    assert_eq!(r.body, body);
}

#[tokio::test]
async fn records_arrival_order_and_resets() {
    let server = start(
        Script::new()
            .route("/a", Route::always(Reply::status(200)))
            .route("/b", Route::always(Reply::status(200))),
    )
    .await;
    let client = client();
    for path in ["/a", "/b", "/a"] {
        send(&client, Method::PUT, &server.url(path), path.to_owned())
            .await
            .unwrap();
    }
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/a", "/b", "/a"]);
    assert_eq!(server.requests_to("/a"), 2);
    assert_eq!(server.requests_to("/b"), 1);
    assert_eq!(server.requests_to("/c"), 0);
    let times: Vec<_> = server.requests().iter().map(|r| r.received_at).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(server.requests()[1].body_json(), None);

    server.reset_records();
    assert_eq!(server.request_count(), 0);
    fetch(&client, &server.url("/a")).await;
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn body_over_the_cap_is_413_and_does_not_consume_a_reply() {
    let server = start(Script::new().max_request_body(1024).route(
        "/m",
        Route::sequence([Reply::status(201), Reply::status(202)]),
    ))
    .await;
    let client = client();
    let at_cap = send(&client, Method::POST, &server.url("/m"), vec![b'a'; 1024])
        .await
        .unwrap();
    assert_eq!(at_cap.status(), 201);

    let over = send(&client, Method::POST, &server.url("/m"), vec![b'b'; 1025])
        .await
        .unwrap();
    assert_eq!(over.status(), 413);
    let body = over.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["error"]["type"], "request_too_large");

    let big = send(
        &client,
        Method::POST,
        &server.url("/m"),
        vec![b'c'; 2 * 1024 * 1024],
    )
    .await
    .unwrap();
    assert_eq!(big.status(), 413);

    let next = send(&client, Method::POST, &server.url("/m"), "small")
        .await
        .unwrap();
    assert_eq!(next.status(), 202, "413s do not advance the sequence");

    let recorded = server.requests();
    assert_eq!(recorded.len(), 4);
    assert_eq!(recorded[1].body.len(), 1024, "cut at the cap");
    assert_eq!(recorded[2].body.len(), 1024);
}
