//! An upstream under load: `Route::capacity` (a shared token bucket) and
//! `Route::outage` (a window of 503s), on loopback, under a paused clock.
//!
//! Nothing else holds a timer while these tests wait on the network, so the
//! paused clock stands still during every request and moves only in the
//! tests' own sleeps: the waits the server names are exact.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{client, get, start, TestClient};
use http_body_util::BodyExt;
use llm_retry_mock::{Reply, Route, Script};
use tokio::time::{sleep, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Status, `retry-after-ms` and `retry-after` of one request.
async fn hit(client: &TestClient, url: &str) -> (u16, Option<String>, Option<String>) {
    let response = get(client, url).await.unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let got = (
        response.status().as_u16(),
        header("retry-after-ms"),
        header("retry-after"),
    );
    response.into_body().collect().await.unwrap();
    got
}

fn ok() -> (u16, Option<String>, Option<String>) {
    (200, None, None)
}

fn limited(ms: &str, secs: &str) -> (u16, Option<String>, Option<String>) {
    (429, Some(ms.to_owned()), Some(secs.to_owned()))
}

fn capacity(per_second: u32, burst: u32) -> Script {
    Script::new().route(
        "/v1/messages",
        Route::capacity(
            per_second,
            burst,
            Reply::rate_limited(None),
            Route::always(Reply::anthropic_ok("hi")),
        ),
    )
}

#[tokio::test(start_paused = true)]
async fn bucket_admits_the_burst_then_names_the_exact_wait() {
    let server = start(capacity(10, 2)).await;
    let url = server.url("/v1/messages");
    let client = client();
    let t0 = Instant::now();

    assert_eq!(hit(&client, &url).await, ok());
    assert_eq!(hit(&client, &url).await, ok());
    assert_eq!(hit(&client, &url).await, limited("100", "1"));
    assert_eq!(t0.elapsed(), Duration::ZERO, "the clock stood still");

    sleep(ms(40)).await;
    assert_eq!(hit(&client, &url).await, limited("60", "1"));
    sleep(ms(60)).await;
    assert_eq!(hit(&client, &url).await, ok());
    assert_eq!(hit(&client, &url).await, limited("100", "1"));

    // A long rest refills up to the burst, never past it.
    sleep(Duration::from_secs(60)).await;
    assert_eq!(hit(&client, &url).await, ok());
    assert_eq!(hit(&client, &url).await, ok());
    assert_eq!(hit(&client, &url).await, limited("100", "1"));
    assert_eq!(server.requests_to("/v1/messages"), 9);
}

#[tokio::test(start_paused = true)]
async fn waits_round_up_to_the_millisecond_and_the_second() {
    let client = client();
    // 3 per second: a token every 333.33… ms.
    let server = start(capacity(3, 1)).await;
    let url = server.url("/v1/messages");
    assert_eq!(hit(&client, &url).await, ok());
    assert_eq!(hit(&client, &url).await, limited("334", "1"));
    // 1 per second, asked 1 ms after the last token went.
    let server = start(capacity(1, 1)).await;
    let url = server.url("/v1/messages");
    assert_eq!(hit(&client, &url).await, ok());
    sleep(ms(1)).await;
    assert_eq!(hit(&client, &url).await, limited("999", "1"));
}

#[tokio::test(start_paused = true)]
async fn a_bucket_that_never_refills_names_no_wait() {
    let server = start(capacity(0, 2)).await;
    let url = server.url("/v1/messages");
    let client = client();
    assert_eq!(hit(&client, &url).await, ok());
    assert_eq!(hit(&client, &url).await, ok());
    sleep(Duration::from_secs(3600)).await;
    assert_eq!(hit(&client, &url).await, (429, None, None));
}

#[tokio::test(start_paused = true)]
async fn headers_already_on_the_reply_are_kept() {
    let server = start(Script::new().route(
        "/x",
        Route::capacity(
            10,
            1,
            Reply::rate_limited(Some(7)),
            Route::always(Reply::status(200)),
        ),
    ))
    .await;
    let url = server.url("/x");
    let client = client();
    assert_eq!(hit(&client, &url).await, ok());
    let response = get(&client, &url).await.unwrap();
    assert_eq!(response.status(), 429);
    let headers = response.headers();
    assert_eq!(headers.get_all("retry-after").iter().count(), 1);
    assert_eq!(headers["retry-after"], "7");
    assert_eq!(headers["retry-after-ms"], "100");
}

#[tokio::test(start_paused = true)]
async fn one_bucket_is_shared_by_every_connection() {
    let server = start(capacity(100, 10)).await;
    let url = server.url("/v1/messages");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..50 {
        // A client each: 50 connections.
        let url = url.clone();
        tasks.spawn(async move { hit(&client(), &url).await.0 });
    }
    let mut statuses = Vec::new();
    while let Some(status) = tasks.join_next().await {
        statuses.push(status.unwrap());
    }
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 10);
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 40);
}

#[tokio::test(start_paused = true)]
async fn refused_requests_do_not_advance_the_admitted_route() {
    let server = start(Script::new().route(
        "/s",
        Route::capacity(
            1,
            1,
            Reply::status(429),
            Route::sequence([Reply::status(201), Reply::status(202)]),
        ),
    ))
    .await;
    let url = server.url("/s");
    let client = client();
    assert_eq!(hit(&client, &url).await.0, 201);
    assert_eq!(hit(&client, &url).await.0, 429);
    assert_eq!(hit(&client, &url).await.0, 429);
    sleep(Duration::from_secs(1)).await;
    assert_eq!(hit(&client, &url).await.0, 202);
}

#[tokio::test(start_paused = true)]
async fn outage_window_is_half_open_and_relative_to_server_start() {
    let server = start(Script::new().route(
        "/v1/messages",
        Route::outage(
            Duration::from_secs(1)..Duration::from_secs(2),
            Reply::anthropic_error(503, "api_error", "Service unavailable"),
            Route::sequence([Reply::status(201), Reply::status(202)]),
        ),
    ))
    .await;
    let url = server.url("/v1/messages");
    let client = client();
    let status = |client: &TestClient| {
        let url = url.clone();
        let client = client.clone();
        async move { hit(&client, &url).await.0 }
    };
    assert_eq!(status(&client).await, 201);
    sleep(ms(999)).await;
    assert_eq!(status(&client).await, 202);
    sleep(ms(1)).await;
    assert_eq!(server.started_at().elapsed(), Duration::from_secs(1));
    assert_eq!(status(&client).await, 503);
    sleep(ms(999)).await;
    assert_eq!(status(&client).await, 503);
    sleep(ms(1)).await;
    // The outage consumed none of the inner replies: the sequence's last
    // reply repeats, as it would have without the window.
    assert_eq!(status(&client).await, 202);
    let times: Vec<Duration> = server
        .requests()
        .iter()
        .map(|r| r.received_at - server.started_at())
        .collect();
    assert_eq!(times, [ms(0), ms(999), ms(1000), ms(1999), ms(2000)]);
}

#[tokio::test(start_paused = true)]
async fn an_outage_takes_no_tokens() {
    let server = start(Script::new().route(
        "/v1/messages",
        Route::outage(
            Duration::ZERO..Duration::from_secs(1),
            Reply::status(503),
            Route::capacity(
                1,
                2,
                Reply::rate_limited(None),
                Route::always(Reply::status(200)),
            ),
        ),
    ))
    .await;
    let url = server.url("/v1/messages");
    let client = client();
    for _ in 0..5 {
        assert_eq!(hit(&client, &url).await.0, 503);
    }
    sleep(Duration::from_secs(1)).await;
    assert_eq!(hit(&client, &url).await, ok());
    assert_eq!(hit(&client, &url).await, ok());
    assert_eq!(hit(&client, &url).await, limited("1000", "1"));
}

#[tokio::test(start_paused = true)]
async fn an_empty_window_never_matches() {
    let server = start(Script::new().route(
        "/x",
        Route::outage(
            Duration::ZERO..Duration::ZERO,
            Reply::status(503),
            Route::always(Reply::status(200)),
        ),
    ))
    .await;
    assert_eq!(hit(&client(), &server.url("/x")).await, ok());
}

#[tokio::test]
async fn capacity_holds_on_the_real_clock() {
    // 50 req/s, burst 5, hammered for ~300 ms by 4 sequential loops:
    // at most 5 + 50 × elapsed admitted, and at least the burst.
    let server = start(capacity(50, 5)).await;
    let url = server.url("/v1/messages");
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let url = url.clone();
        tasks.spawn(async move {
            let client = client();
            let mut admitted = 0u32;
            while started.elapsed() < ms(300) {
                if hit(&client, &url).await.0 == 200 {
                    admitted += 1;
                }
            }
            admitted
        });
    }
    let mut admitted = 0;
    while let Some(n) = tasks.join_next().await {
        admitted += n.unwrap();
    }
    let bound = 5.0 + 50.0 * started.elapsed().as_secs_f64();
    assert!(f64::from(admitted) <= bound, "{admitted} > {bound}");
    // The burst is admitted however slow the machine is; how much of the
    // refill gets used depends on scheduling, so it is not asserted here
    // (the paused-clock tests above pin the refill exactly).
    assert!(admitted >= 5, "only {admitted} admitted");
}

#[tokio::test(start_paused = true)]
async fn an_answer_cut_short_gives_its_in_flight_slot_back_at_once() {
    // Room for one in flight. The admitted answer is scripted to stream
    // for 10 s but is cut after its first bytes: the slot is free as soon
    // as the answer is over, not when the script would have ended.
    use llm_retry_mock::{Limit, Quota, SseEvent};
    let events = [
        SseEvent::new(None, "first"),
        SseEvent::new(None, "second").after(Duration::from_secs(10)),
    ];
    let limit = Limit::new(Quota::Bucket {
        per_second: 1000,
        burst: 1000,
    })
    .max_in_flight(1);
    let route = Route::limited(
        limit,
        Reply::rate_limited(None),
        Route::sequence_then(
            [Reply::sse(events).reset_after_bytes(5)],
            Reply::status(200),
        ),
    );
    let mock = start(Script::new().route("/", route)).await;
    let url = mock.url("/");
    let cut = client();
    let response = get(&cut, &url).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.into_body().collect().await.is_err(), "cut short");
    let start = Instant::now();
    let next = client();
    assert_eq!(get(&next, &url).await.unwrap().status(), 200);
    assert!(start.elapsed() < Duration::from_secs(1));
}
