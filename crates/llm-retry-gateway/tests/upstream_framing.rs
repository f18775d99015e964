//! An upstream answer's framing as the client sees it: never a body cut
//! short and presented as whole.
#![allow(clippy::unwrap_used)]

mod support;

use http_body_util::BodyExt;
use support::{gateway, no_env, one_target, post, PROMPT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A raw HTTP/1.1 upstream that answers every request with `answer`, then
/// closes the connection.
async fn raw_upstream(answer: &'static [u8]) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (mut tcp, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                // The gateway's request: a head with a content-length body.
                let mut got = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let n = tcp.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&chunk[..n]);
                    if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        if got.len() >= end + 4 + PROMPT.len() {
                            break;
                        }
                    }
                }
                tcp.write_all(answer).await.unwrap();
                let _ = tcp.shutdown().await;
            });
        }
    });
    url
}

/// A request through a gateway whose one target is `url`, never retried;
/// the answer, and the gateway (running while it is held).
async fn through_a_gateway(url: &str) -> (http::Response<hyper::body::Incoming>, support::Running) {
    let gw = gateway(&one_target(url, "", "max_retries = 0"), no_env).await;
    let response = support::client()
        .request(post(&gw.url("/v1/messages"), PROMPT))
        .await
        .unwrap();
    (response, gw)
}

/// An upstream that sends `Transfer-Encoding: chunked` with a
/// `Content-Length` that disagrees (RFC 9112 §6.3: the chunked coding
/// wins, and an intermediary must drop the received Content-Length). The
/// client reads all 26 chunked bytes. (Had the gateway handed on the
/// upstream's `content-length: 5`, hyper would cut the body to 5 bytes and
/// the client would read a complete, well-framed 200 of a prefix.)
#[tokio::test]
async fn a_chunked_answer_with_a_stray_content_length_is_not_cut_to_it() {
    let url = raw_upstream(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n",
    )
    .await;
    let (response, _gw) = through_a_gateway(&url).await;
    assert_eq!(response.status(), 200);
    let declared = response.headers().get("content-length").cloned();
    match response.into_body().collect().await {
        Ok(body) => assert_eq!(
            body.to_bytes(),
            "abcdefghijklmnopqrstuvwxyz",
            "a body the client read as complete (content-length {declared:?}) is the upstream's whole body"
        ),
        Err(error) => panic!("a valid chunked answer failed at the client: {error}"),
    }
}

/// An upstream that sends its body under a transfer coding other than
/// chunked (`transfer-encoding: gzip`, close-delimited). hyper's client
/// does not decode it, and without its `transfer-encoding` (a hop-by-hop
/// header) the coded bytes would pass as the plain body: the client gets a
/// 502 that says why, and the request's in-flight slot is given back.
#[tokio::test]
async fn a_body_under_a_transfer_coding_the_gateway_cannot_decode_is_a_502() {
    // A gzip member (RFC 1952 magic 1f 8b) standing for `{"a":1}`.
    let url = raw_upstream(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: gzip\r\n\r\n\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xabVJT\xb22\xac\x05\x00\xe8\x8f\x1b\x94\x07\x00\x00\x00",
    )
    .await;
    let (response, gw) = through_a_gateway(&url).await;
    let (head, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    assert_eq!(head.status, 502, "{body:?}");
    assert!(
        String::from_utf8_lossy(&body).contains("transfer coding"),
        "{body:?}"
    );
    assert_eq!(gw.gateway.in_flight(), 0);
}
