//! The gateway on the wire: failover, the give-up answer, credentials,
//! routing, streams passing through, draining.
#![allow(clippy::unwrap_used)]

mod support;

use hyper_util::rt::{TokioExecutor, TokioIo};
use llm_retry_mock::{Reply, Route};
use std::time::Duration;
use support::{gateway, no_env, one_target, post, rate_limited, send, target, two_targets, PROMPT};

#[tokio::test]
async fn a_rate_limited_first_target_fails_over_to_the_second() {
    let a = target(Route::always(rate_limited("1"))).await;
    let b = target(Route::always(Reply::anthropic_ok("from b"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let (head, body) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert!(String::from_utf8_lossy(&body).contains("from b"));
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
    assert_eq!(
        b.requests()[0].body,
        PROMPT.as_bytes(),
        "the body unchanged"
    );
}

#[tokio::test]
async fn when_every_target_refuses_the_answer_says_do_not_retry_and_when_to_come_back() {
    let a = target(Route::always(rate_limited("5"))).await;
    let b = target(Route::always(rate_limited("3"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 429);
    assert_eq!(head.headers["x-should-retry"], "false");
    assert_eq!(head.headers["retry-after"], "3");
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test]
async fn an_ambiguous_failure_is_not_failed_over_and_is_final() {
    let a = target(Route::always(Reply::status(500))).await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 500);
    assert_eq!(
        head.headers["x-should-retry"], "false",
        "the gateway already retried"
    );
    assert_eq!(b.request_count(), 0);
}

#[tokio::test]
async fn a_target_with_its_own_key_never_sees_the_clients_and_no_header_picks_the_upstream() {
    let a = target(Route::always(Reply::anthropic_ok("a"))).await;
    let decoy = target(Route::always(Reply::anthropic_ok("decoy"))).await;
    let toml = one_target(
        &a.url(""),
        "",
        "api_key_env = \"TARGET_KEY\"\nauth = \"x-api-key\"",
    );
    let gw = gateway(&toml, |var| {
        (var == "TARGET_KEY").then(|| "target-secret".to_owned())
    })
    .await;
    let mut request = post(&gw.url("/v1/messages"), PROMPT);
    let headers = request.headers_mut();
    headers.insert("x-api-key", "client-secret".parse().unwrap());
    headers.insert("authorization", "Bearer client-secret".parse().unwrap());
    headers.insert("host", decoy.addr().to_string().parse().unwrap());
    headers.insert(
        "x-forwarded-host",
        decoy.addr().to_string().parse().unwrap(),
    );
    let (head, _) = send(request).await;
    assert_eq!(head.status, 200);
    assert_eq!(decoy.request_count(), 0);
    let seen = &a.requests()[0];
    assert_eq!(seen.header_str("x-api-key"), Some("target-secret"));
    assert_eq!(seen.header_str("authorization"), None);
}

#[tokio::test]
async fn a_target_without_a_key_forwards_the_clients() {
    let a = target(Route::always(Reply::anthropic_ok("a"))).await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let mut request = post(&gw.url("/v1/messages"), PROMPT);
    request
        .headers_mut()
        .insert("x-api-key", "client-key".parse().unwrap());
    send(request).await;
    assert_eq!(a.requests()[0].header_str("x-api-key"), Some("client-key"));
}

#[tokio::test]
async fn routes_match_by_path_and_model_and_targets_rewrite_the_model() {
    let claude = target(Route::always(Reply::anthropic_ok("claude"))).await;
    let gpt = target(Route::always(Reply::openai_ok("gpt"))).await;
    let toml = format!(
        r#"
[[route]]
name = "claude"
path_prefix = "/v1/messages"
models = ["claude-sonnet-4-5"]
[[route.target]]
name = "c"
base_url = "{}"
model = "claude-sonnet-4-5-20250929"

[[route]]
name = "openai"
path_prefix = "/v1/chat/completions"
[[route.target]]
name = "o"
base_url = "{}"
"#,
        claude.url(""),
        gpt.url("")
    );
    let gw = gateway(&toml, no_env).await;
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert_eq!(
        claude.requests()[0].body_json().unwrap()["model"],
        "claude-sonnet-4-5-20250929"
    );
    let other_model = PROMPT.replace("claude-sonnet-4-5", "claude-opus-4");
    let (head, _) = send(post(&gw.url("/v1/messages"), &other_model)).await;
    assert_eq!(head.status, 404, "no route takes that model");
    let (head, _) = send(post(
        &gw.url("/v1/chat/completions"),
        r#"{"model":"gpt-4o","messages":[]}"#,
    ))
    .await;
    assert_eq!(head.status, 200);
    assert_eq!(gpt.request_count(), 1);
}

#[tokio::test]
async fn a_stream_passes_through_byte_for_byte_after_a_failover_before_content() {
    let a = target(Route::always(Reply::anthropic_stream_error(
        "overloaded_error",
        "Overloaded",
    )))
    .await;
    let good = Reply::anthropic_stream(&["Hello", " there"]);
    let expected = good.expected_body().unwrap();
    let b = target(Route::always(good)).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let (head, body) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.headers["content-type"], "text/event-stream");
    assert_eq!(body, expected);
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test]
async fn draining_lets_streams_finish_and_turns_new_requests_away() {
    let slow = Reply::sse(
        (0..5).map(|i| {
            llm_retry_mock::SseEvent::new(Some("content_block_delta"), &format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{i}"}}}}"#))
                .after(Duration::from_millis(100))
        }),
    );
    let expected = slow.expected_body().unwrap();
    let a = target(Route::always(slow)).await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let mut gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let response = support::client()
        .request(post(&gw.url("/v1/messages"), PROMPT))
        .await
        .unwrap();
    assert_eq!(gw.gateway.in_flight(), 1);
    gw.signal();
    // Draining has begun once health says so: no fixed sleep to guess it.
    loop {
        let health = http::Request::get(gw.url("/healthz"))
            .body(Default::default())
            .unwrap();
        if support::client().request(health).await.unwrap().status() == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 503);
    assert_eq!(head.headers["retry-after"], "1");
    use http_body_util::BodyExt;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, expected, "the stream in flight finished whole");
    // Once the stream ended the drain is over and serving returns (a
    // drain that never ends fails here instead of hanging the suite).
    tokio::time::timeout(Duration::from_secs(60), gw.served)
        .await
        .expect("the drain ended")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn health_answers_until_the_drain() {
    let a = target(Route::always(Reply::anthropic_ok("a"))).await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let response = support::client()
        .request(
            http::Request::get(gw.url("/healthz"))
                .body(Default::default())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    gw.gateway.start_draining();
    let response = support::client()
        .request(
            http::Request::get(gw.url("/healthz"))
                .body(Default::default())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
}

#[tokio::test]
async fn a_gateway_key_is_required_when_configured_and_never_forwarded() {
    let a = target(Route::always(Reply::anthropic_ok("a"))).await;
    let toml = one_target(&a.url(""), "client_key_env = \"GW_KEY\"", "");
    let gw = gateway(&toml, |var| {
        (var == "GW_KEY").then(|| "gw-secret".to_owned())
    })
    .await;
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 401);
    assert_eq!(a.request_count(), 0);
    let mut request = post(&gw.url("/v1/messages"), PROMPT);
    request
        .headers_mut()
        .insert("x-api-key", "gw-secret".parse().unwrap());
    let (head, _) = send(request).await;
    assert_eq!(head.status, 200);
    assert_eq!(
        a.requests()[0].header_str("x-api-key"),
        None,
        "the gateway's key stays at the gateway"
    );
}

#[tokio::test]
async fn a_non_loopback_listener_with_keyed_targets_needs_a_gateway_key() {
    let toml = one_target(
        "https://api.anthropic.com",
        "listen = \"0.0.0.0:8080\"",
        "api_key_env = \"K\"\nauth = \"x-api-key\"",
    );
    let error = llm_retry_gateway::Config::parse(&toml, |_| Some("k".to_owned())).unwrap_err();
    assert_eq!(error.field, "listen", "{error}");
    let with_key = format!("client_key_env = \"GW\"\n{toml}");
    llm_retry_gateway::Config::parse(&with_key, |_| Some("k".to_owned())).unwrap();
}

#[tokio::test]
async fn paths_that_could_walk_out_of_a_base_path_are_refused() {
    let a = target(Route::always(Reply::anthropic_ok("a"))).await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    for path in [
        "/v1/messages/../../admin",
        "/v1/%2e%2e/admin",
        "/v1//messages",
        "/v1/x%2Fy",
    ] {
        let (head, _) = send(post(&gw.url(path), PROMPT)).await;
        assert_eq!(head.status, 400, "{path}");
    }
    assert_eq!(a.request_count(), 0);
}

#[tokio::test]
async fn cookies_and_connection_named_headers_do_not_cross() {
    let a = target(Route::always(
        Reply::anthropic_ok("a").header("set-cookie", "session=upstream"),
    ))
    .await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let mut request = post(&gw.url("/v1/messages"), PROMPT);
    let headers = request.headers_mut();
    headers.insert("cookie", "client=1".parse().unwrap());
    headers.insert("connection", "x-secret-hop".parse().unwrap());
    headers.insert("x-secret-hop", "hop".parse().unwrap());
    headers.insert("proxy-authorization", "Basic abc".parse().unwrap());
    let (head, _) = send(request).await;
    assert_eq!(head.status, 200);
    assert!(head.headers.get("set-cookie").is_none());
    let seen = &a.requests()[0];
    for name in ["cookie", "x-secret-hop", "proxy-authorization"] {
        assert_eq!(seen.header_str(name), None, "{name} was forwarded");
    }
}

#[tokio::test]
async fn a_give_up_with_no_answer_to_hand_over_still_says_when_to_come_back() {
    let a = target(Route::always(rate_limited("5"))).await;
    let toml = one_target(&a.url(""), "", "max_retries = 0\ncooldown = true");
    let gw = gateway(&toml, no_env).await;
    let started = std::time::Instant::now();
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 429);
    // The target cools down: the next request reaches no target at all,
    // and is told it is rate-limited, with the wait left.
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 429);
    assert_eq!(head.headers["x-should-retry"], "false");
    let millis: u64 = head.headers["retry-after-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(millis <= 5000 && millis > 0, "{millis} ms");
    // What is left of the named 5 s, however long the first request took.
    let secs: u64 = head.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // Rounded up to seconds: no more than named, and no less than named
    // minus the time since (measured, so a slow machine cannot fail it).
    let since = started.elapsed().as_secs();
    assert!(
        secs <= 5 && secs + since + 1 >= 5,
        "{secs} s left, {since} s since"
    );
    assert_eq!(a.request_count(), 1);
}

#[tokio::test]
async fn a_stream_that_stalls_after_its_first_content_is_ended() {
    use http_body_util::BodyExt;
    let stalls = Reply::sse([
        llm_retry_mock::SseEvent::new(
            Some("content_block_delta"),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        ),
        llm_retry_mock::SseEvent::new(Some("message_stop"), r#"{"type":"message_stop"}"#)
            .after(Duration::from_secs(30)),
    ]);
    let a = target(Route::always(stalls)).await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let config = format!(
        "stream_idle_timeout = \"300ms\"\n{}",
        two_targets(&a, &b, "")
    );
    let gw = gateway(&config, no_env).await;
    let response = support::client()
        .request(post(&gw.url("/v1/messages"), PROMPT))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // Without the idle timeout the stream would end cleanly after 30 s:
    // an error here is the timeout, with no wall-clock threshold.
    let read = response.into_body().collect().await;
    assert!(read.is_err(), "it ends in an error, not a clean end");
    assert_eq!(
        gw.gateway.in_flight(),
        0,
        "and its request is no longer in flight"
    );
}

/// Also under a base path a provider puts before the API's own (Azure's
/// `/openai/v1/responses`).
#[tokio::test]
async fn a_responses_request_continuing_stored_state_stays_on_its_first_target() {
    for path in ["/v1/responses", "/openai/v1/responses"] {
        let a = llm_retry_mock::MockServer::start(
            llm_retry_mock::Script::new().route(path, Route::always(rate_limited("1"))),
        )
        .await
        .unwrap();
        let b = llm_retry_mock::MockServer::start(
            llm_retry_mock::Script::new().route(path, Route::always(Reply::openai_ok("b"))),
        )
        .await
        .unwrap();
        let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
        let continuing =
            r#"{"model":"gpt-4o","previous_response_id":"resp_1","input":"and then?"}"#;
        let (head, _) = send(post(&gw.url(path), continuing)).await;
        assert_eq!(
            head.status, 429,
            "{path}: bound to a's stored response, not failed over"
        );
        assert_eq!(b.request_count(), 0, "{path}");
        let fresh = r#"{"model":"gpt-4o","input":"hello"}"#;
        let (head, _) = send(post(&gw.url(path), fresh)).await;
        assert_eq!(head.status, 200, "{path}: an unbound request fails over");
    }
}

/// Sends `head` on a new connection and reads until the gateway closes it;
/// what came back, and how long (on the paused clock) it took.
async fn send_and_wait_for_close(addr: std::net::SocketAddr, head: &[u8]) -> (Vec<u8>, Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let start = tokio::time::Instant::now();
    tcp.write_all(head).await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), tcp.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "still open after a minute: {got:?}");
    (got, start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_client_that_never_finishes_its_request_head_is_disconnected() {
    let upstream = target(Route::always(Reply::anthropic_ok("hi"))).await;
    let toml = one_target(&upstream.url(""), "header_read_timeout = \"5s\"", "");
    let gw = gateway(&toml, no_env).await;
    // Half a head, then nothing: the connection is closed at the timeout,
    // with no answer and nothing sent upstream.
    let (got, took) =
        send_and_wait_for_close(gw.addr, b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n").await;
    assert!(!String::from_utf8_lossy(&got).contains("200 OK"), "{got:?}");
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(6),
        "{took:?}"
    );
    assert_eq!(upstream.request_count(), 0);
    // A whole head is answered.
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{PROMPT}",
        PROMPT.len()
    );
    let (got, _) = send_and_wait_for_close(gw.addr, head.as_bytes()).await;
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"),
        "{got:?}"
    );
}

/// Before a connection's first request, whatever protocol it begins
/// (nothing yet, one byte of it, HTTP/2's whole preface), the client has
/// the header-read timeout to send a request's head: a connection that
/// sends none would hold a file descriptor and a task for good.
#[tokio::test(start_paused = true)]
async fn a_connection_that_sends_no_request_head_is_closed_at_the_header_read_timeout() {
    let upstream = target(Route::always(Reply::anthropic_ok("hi"))).await;
    let toml = one_target(&upstream.url(""), "header_read_timeout = \"5s\"", "");
    let gw = gateway(&toml, no_env).await;
    for head in [
        &b""[..],
        &b"P"[..],
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
    ] {
        let (_, took) = send_and_wait_for_close(gw.addr, head).await;
        assert!(
            took >= Duration::from_secs(5) && took < Duration::from_secs(6),
            "{head:?} closed after {took:?}"
        );
    }
    assert_eq!(upstream.request_count(), 0);
}

/// An HTTP/2 client (prior knowledge) is served: its requests go on to an
/// HTTP/1 upstream as HTTP/1.1. Once its first request came, its one
/// connection stays open past the header-read timeout. (On the real
/// clock: on the paused one the gateway's read of an HTTP/2 request body
/// hit its timeout, 408, which the real clock did not show.)
#[tokio::test]
async fn an_http2_client_is_served_past_the_header_read_timeout() {
    let upstream = target(Route::always(Reply::anthropic_ok("hi"))).await;
    let toml = one_target(&upstream.url(""), "header_read_timeout = \"1s\"", "");
    let gw = gateway(&toml, no_env).await;
    let tcp = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let (mut h2, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(connection);
    for _ in 0..2 {
        let mut request = post(&gw.url("/v1/messages"), PROMPT);
        *request.version_mut() = http::Version::HTTP_2;
        let response = h2.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        // Past the timeout: the connection is still the one it was.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
    }
    assert_eq!(upstream.request_count(), 2);
}

/// A log sink for one test (the subscriber is the thread's, and a
/// current-thread runtime polls every task on it).
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn requests_still_in_flight_when_the_grace_ends_are_cut_and_logged() {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let logs = logs.clone();
            move || logs.clone()
        })
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let endless = Reply::sse((0..100).map(|i| {
        llm_retry_mock::SseEvent::new(Some("content_block_delta"), &format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{i}"}}}}"#))
            .after(Duration::from_secs(1))
    }));
    let upstream = target(Route::always(endless)).await;
    let toml = one_target(&upstream.url(""), "shutdown_grace = \"3s\"", "");
    let mut gw = gateway(&toml, no_env).await;
    let response = support::client()
        .request(post(&gw.url("/v1/messages"), PROMPT))
        .await
        .unwrap();
    let start = tokio::time::Instant::now();
    gw.signal();
    tokio::time::timeout(Duration::from_secs(60), gw.served)
        .await
        .expect("serving ends after the grace and its last second")
        .unwrap()
        .unwrap();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(5),
        "{took:?}"
    );
    use http_body_util::BodyExt;
    assert!(
        response.into_body().collect().await.is_err(),
        "the stream was cut"
    );
    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        logged.contains("the shutdown grace period ended") && logged.contains("cut=1"),
        "{logged}"
    );
}

#[tokio::test]
async fn the_gateways_own_pages_take_get_and_head_only_and_other_paths_go_through_the_routes() {
    let a = target(Route::always(Reply::anthropic_ok("a"))).await;
    let gw = gateway(&one_target(&a.url(""), "", ""), no_env).await;
    let call = |method: &str, path: &str| {
        http::Request::builder()
            .method(method)
            .uri(gw.url(path))
            .body(Default::default())
            .unwrap()
    };
    for method in ["GET", "HEAD"] {
        let (head, _) = send(call(method, "/healthz")).await;
        assert_eq!(head.status, 200, "{method}");
    }
    let (head, _) = send(call("POST", "/healthz")).await;
    assert_eq!(head.status, 405);
    assert_eq!(head.headers["allow"], "GET,HEAD");
    // No recorder was handed to this gateway.
    let (head, _) = send(call("GET", "/metrics")).await;
    assert_eq!(head.status, 404);
    assert_eq!(a.request_count(), 0);
    // A path that only starts like a page is the routes': this route
    // takes every path, and the target has no such page.
    let (head, _) = send(call("GET", "/healthz/x")).await;
    assert_eq!(head.status, 404);
    assert_eq!(a.request_count(), 1);
}
