//! One decision per attempt, whatever carried the failure: the same response
//! head on a 429, a 529, a 503 and a `200` stream whose first event is the
//! matching error gives the same decision.
#![allow(clippy::unwrap_used)]

mod support;

use http_body_util::BodyExt;
use llm_retry::stream_guard::StreamGuardLayer;
use llm_retry::{RetryLayer, RetryReport, StopReason};
use llm_retry_mock::{Reply, Route};
use std::time::Duration;
use support::{client, fast_policy, messages_request, mock};
use tower::{ServiceBuilder, ServiceExt};

/// A failure and the success that follows it, by carrier.
struct Carrier {
    name: &'static str,
    failure: fn() -> Reply,
    success: fn() -> Reply,
}

const CARRIERS: [Carrier; 6] = [
    Carrier {
        name: "429",
        failure: || Reply::anthropic_error(429, "rate_limit_error", "Rate limited"),
        success: || Reply::anthropic_ok("ok"),
    },
    Carrier {
        name: "stream rate_limit_error",
        failure: || Reply::anthropic_stream_error("rate_limit_error", "Rate limited"),
        success: || Reply::anthropic_stream(&["ok"]),
    },
    Carrier {
        name: "529",
        failure: || Reply::anthropic_error(529, "overloaded_error", "Overloaded"),
        success: || Reply::anthropic_ok("ok"),
    },
    Carrier {
        name: "stream overloaded_error",
        failure: || Reply::anthropic_stream_error("overloaded_error", "Overloaded"),
        success: || Reply::anthropic_stream(&["ok"]),
    },
    Carrier {
        name: "503",
        failure: || Reply::anthropic_error(503, "api_error", "Internal server error"),
        success: || Reply::anthropic_ok("ok"),
    },
    Carrier {
        name: "stream api_error",
        failure: || Reply::anthropic_stream_error("api_error", "Internal server error"),
        success: || Reply::anthropic_stream(&["ok"]),
    },
];

/// Header name/value pairs on the failure's response head.
type Head<'a> = &'a [(&'a str, &'a str)];

/// What a request's report says, less what differs by carrier (the status).
#[derive(Debug, PartialEq)]
struct Seen {
    attempts: u32,
    total_wait: Duration,
    server_waits_honoured: u32,
    stop: &'static str,
}

async fn run(carrier: &Carrier, head: &[(&str, &str)], behind_gateway: bool) -> Seen {
    let failure = head
        .iter()
        .fold((carrier.failure)(), |reply, (name, value)| {
            reply.header(name, value)
        });
    let mock = mock(Route::sequence([failure, (carrier.success)()])).await;
    let policy = fast_policy()
        .behind_gateway(behind_gateway)
        .build()
        .unwrap();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .layer(StreamGuardLayer::new())
        .service(client());
    let report: RetryReport = match service
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
    {
        Ok(response) => {
            let report = response.extensions().get::<RetryReport>().unwrap().clone();
            response.into_body().collect().await.unwrap();
            report
        }
        Err(error) => error
            .downcast_ref::<llm_retry::RetryError>()
            .unwrap()
            .report()
            .clone(),
    };
    assert_eq!(
        mock.request_count() as u32,
        report.attempts,
        "{}",
        carrier.name
    );
    Seen {
        attempts: report.attempts,
        total_wait: report.total_wait,
        server_waits_honoured: report.server_waits_honoured,
        stop: report.stop.label(),
    }
}

#[tokio::test(start_paused = true)]
async fn the_head_decides_alike_on_every_carrier() {
    let secs = Duration::from_secs;
    let cases: &[(Head<'_>, bool, Seen)] = &[
        // x-should-retry: false beats everything.
        (
            &[("x-should-retry", "false"), ("retry-after", "1")],
            false,
            Seen {
                attempts: 1,
                total_wait: Duration::ZERO,
                server_waits_honoured: 0,
                stop: "not_retryable",
            },
        ),
        // A named wait is honoured as a floor (spread by at most 10 %).
        (
            &[("retry-after", "2")],
            false,
            Seen {
                attempts: 2,
                total_wait: secs(2),
                server_waits_honoured: 1,
                stop: "succeeded",
            },
        ),
        // A zero in one header does not hide the wait named by another.
        (
            &[("retry-after-ms", "0"), ("retry-after", "3")],
            false,
            Seen {
                attempts: 2,
                total_wait: secs(3),
                server_waits_honoured: 1,
                stop: "succeeded",
            },
        ),
        // Behind a gateway the failure is the gateway's to retry...
        (
            &[],
            true,
            Seen {
                attempts: 1,
                total_wait: Duration::ZERO,
                server_waits_honoured: 0,
                stop: "left_to_gateway",
            },
        ),
        // ...unless it says x-should-retry: true.
        (
            &[("x-should-retry", "true"), ("retry-after", "1")],
            true,
            Seen {
                attempts: 2,
                total_wait: secs(1),
                server_waits_honoured: 1,
                stop: "succeeded",
            },
        ),
    ];
    for (head, behind_gateway, want) in cases {
        for carrier in &CARRIERS {
            let mut seen = run(carrier, head, *behind_gateway).await;
            // The spread is at most 10 % of the named wait: compare floors.
            if seen.server_waits_honoured > 0 {
                assert!(
                    seen.total_wait >= want.total_wait
                        && seen.total_wait <= want.total_wait + want.total_wait / 10,
                    "{}: {head:?}: waited {:?}",
                    carrier.name,
                    seen.total_wait
                );
                seen.total_wait = want.total_wait;
            }
            assert_eq!(&seen, want, "{}: {head:?}", carrier.name);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_error_event_is_final_when_its_head_says_so() {
    // The stream was sent three times and ended "overloaded 3 times in a
    // row" when the head's x-should-retry: false went unread.
    let failure = || {
        Reply::anthropic_stream_error("overloaded_error", "Overloaded")
            .header("x-should-retry", "false")
    };
    let mock = mock(Route::sequence([failure(), failure(), failure()])).await;
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(fast_policy().build().unwrap()))
        .layer(StreamGuardLayer::new())
        .service(client());
    let error = service
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap_err();
    let error = error.downcast_ref::<llm_retry::RetryError>().unwrap();
    assert_eq!(mock.request_count(), 1);
    assert!(
        matches!(
            error.report().stop,
            StopReason::NotRetryable(llm_retry::classify::FatalKind::ServerDeclined(_))
        ),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_named_in_the_message_counts_in_a_stream_event_too() {
    let message = "Rate limited. Please try again in 2s.";
    let carriers = [
        Carrier {
            name: "429 body",
            failure: || {
                Reply::anthropic_error(
                    429,
                    "rate_limit_error",
                    "Rate limited. Please try again in 2s.",
                )
            },
            success: || Reply::anthropic_ok("ok"),
        },
        Carrier {
            name: "stream rate_limit_error",
            failure: || {
                Reply::anthropic_stream_error(
                    "rate_limit_error",
                    "Rate limited. Please try again in 2s.",
                )
            },
            success: || Reply::anthropic_stream(&["ok"]),
        },
    ];
    for carrier in &carriers {
        let seen = run(carrier, &[], false).await;
        assert_eq!(seen.server_waits_honoured, 1, "{}: {message}", carrier.name);
        assert!(
            seen.total_wait >= Duration::from_secs(2)
                && seen.total_wait <= Duration::from_millis(2_200),
            "{}: {seen:?}",
            carrier.name
        );
    }
}
