//! Resets: before the headers (RST) and after n body bytes.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::ErrorKind;
use std::time::Duration;

use bytes::Bytes;
use common::{client, fetch, get, read_until_error, send, start};
use http::Method;
use llm_retry_mock::{Reply, Route, Script};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn reset_before_headers_fails_the_request_and_is_recorded() {
    let server = start(Script::new().route(
        "/r",
        Route::sequence([Reply::reset_before_headers(), Reply::anthropic_ok("after")]),
    ))
    .await;
    let client = client();
    let err = send(&client, Method::POST, &server.url("/r"), "payload")
        .await
        .unwrap_err();
    assert!(!err.is_connect(), "the request reached the server: {err:?}");
    assert_eq!(server.request_count(), 1);
    assert_eq!(server.requests()[0].body, Bytes::from_static(b"payload"));
    // The next request (new connection) gets the next reply.
    assert_eq!(fetch(&client, &server.url("/r")).await.0, 200);
}

#[tokio::test]
async fn reset_before_headers_is_a_genuine_rst() {
    let server = start(Script::new().fallback(Route::always(Reply::reset_before_headers()))).await;
    let mut socket = TcpStream::connect(server.addr()).await.unwrap();
    socket
        .write_all(b"POST /x HTTP/1.1\r\nhost: mock\r\ncontent-length: 2\r\n\r\nhi")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let err = socket.read_to_end(&mut buf).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);
    assert!(buf.is_empty(), "no response byte: {buf:?}");
    assert_eq!(server.requests()[0].body, Bytes::from_static(b"hi"));
}

#[tokio::test(start_paused = true)]
async fn reset_before_headers_honours_delay() {
    let wait = Duration::from_secs(10);
    let server =
        start(Script::new().fallback(Route::always(Reply::reset_before_headers().delay(wait))))
            .await;
    let start = tokio::time::Instant::now();
    assert!(get(&client(), &server.url("/")).await.is_err());
    assert!(start.elapsed() >= wait);
}

async fn cut(reply: Reply) -> (Vec<u8>, bool) {
    let server = start(Script::new().route("/c", Route::always(reply))).await;
    let response = get(&client(), &server.url("/c")).await.unwrap();
    assert_eq!(response.status(), 200);
    let (got, err) = read_until_error(response.into_body()).await;
    (got, err.is_some())
}

#[tokio::test]
async fn reset_after_bytes_delivers_exactly_n_then_errors() {
    let whole = Reply::anthropic_ok("a fairly long answer to cut somewhere in the middle");
    let stream = Reply::anthropic_stream(&["one", "two", "three", "four"]);
    let whole_len = whole.expected_body().unwrap().len();
    let stream_len = stream.expected_body().unwrap().len();
    let cases = [
        (whole.clone(), 0),
        (whole.clone(), 1),
        (whole.clone(), 17),
        (whole.clone(), whole_len), // the whole body, but never its end
        (whole, whole_len + 100),
        (stream.clone(), 0),
        (stream.clone(), 250),
        (stream.clone(), stream_len - 1),
        (stream, stream_len),
    ];
    for (reply, n) in cases {
        let reply = reply.reset_after_bytes(n);
        let want = reply.delivered_body().unwrap();
        assert_eq!(want.len(), n.min(want.len()));
        let (got, errored) = cut(reply).await;
        assert_eq!(got, want, "n = {n}");
        assert!(errored, "n = {n}: the body must end in an error");
    }
}

#[tokio::test]
async fn reset_after_bytes_delivers_a_large_prefix() {
    let big = Bytes::from(vec![b'x'; 4 * 1024 * 1024]);
    let n = 3 * 1024 * 1024 + 7;
    let (got, errored) = cut(Reply::status(200).body(big).reset_after_bytes(n)).await;
    assert_eq!(got.len(), n);
    assert!(errored);
}

#[tokio::test]
async fn reset_after_bytes_never_ends_the_chunked_body_on_the_wire() {
    let reply = Reply::openai_ok("hi").reset_after_bytes(5);
    let prefix = String::from_utf8(reply.delivered_body().unwrap().to_vec()).unwrap();
    let server = start(Script::new().fallback(Route::always(reply))).await;
    let mut socket = TcpStream::connect(server.addr()).await.unwrap();
    socket
        .write_all(b"GET / HTTP/1.1\r\nhost: mock\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    socket.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    assert_eq!(
        body,
        format!("5\r\n{prefix}\r\n"),
        "5 bytes in one chunk, no last chunk"
    );
}

#[tokio::test]
async fn reset_after_bytes_over_http_1_0_declares_an_unreachable_length() {
    let reply = Reply::anthropic_ok("hi").reset_after_bytes(10_000);
    let full = reply.delivered_body().unwrap();
    let server = start(Script::new().fallback(Route::always(reply))).await;
    let mut socket = TcpStream::connect(server.addr()).await.unwrap();
    socket.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut buf = Vec::new();
    socket.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let declared = format!("content-length: {}", full.len() + 1);
    assert!(head.to_ascii_lowercase().contains(&declared), "{head}");
    assert_eq!(body.as_bytes(), &full[..]);
}
