//! Shared helpers: a real hyper_util legacy client against a real mock.
#![allow(dead_code, clippy::unwrap_used)]

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, Error};
use hyper_util::rt::TokioExecutor;
use llm_retry_mock::{MockServer, Script};

pub(crate) type TestClient = Client<HttpConnector, Full<Bytes>>;

pub(crate) fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub(crate) async fn start(script: Script) -> MockServer {
    MockServer::start(script).await.unwrap()
}

pub(crate) async fn send(
    client: &TestClient,
    method: Method,
    url: &str,
    body: impl Into<Bytes>,
) -> Result<Response<Incoming>, Error> {
    let request = Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(body.into()))
        .unwrap();
    client.request(request).await
}

pub(crate) async fn get(client: &TestClient, url: &str) -> Result<Response<Incoming>, Error> {
    send(client, Method::GET, url, Bytes::new()).await
}

/// Status and full body of a request that must succeed.
pub(crate) async fn fetch(client: &TestClient, url: &str) -> (u16, Bytes) {
    let response = get(client, url).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body)
}

/// Reads body frames until the end or the first error; returns the bytes
/// read and the error, if any.
pub(crate) async fn read_until_error(mut body: Incoming) -> (Vec<u8>, Option<hyper::Error>) {
    let mut got = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    got.extend_from_slice(&data);
                }
            }
            Err(err) => return (got, Some(err)),
        }
    }
    (got, None)
}

/// Polls `cond` every 5 ms (tokio clock), at most `tries` times.
pub(crate) async fn wait_until(tries: usize, mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..tries {
        if cond() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    cond()
}
