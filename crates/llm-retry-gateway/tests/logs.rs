//! What the gateway logs: each field once per line, and no secret.
#![allow(clippy::unwrap_used)]

mod support;

use support::{gateway, no_env, one_target, post, send, PROMPT};

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

impl Logs {
    /// Captures the logs of the current thread until the guard drops.
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        Logs::capture_at(tracing::Level::INFO)
    }

    /// As [`capture`](Logs::capture), with every line at `level` and above.
    fn capture_at(level: tracing::Level) -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer({
                let logs = logs.clone();
                move || logs.clone()
            })
            .with_ansi(false)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// The `name=` fields of one log line, in order.
fn field_names(line: &str) -> Vec<&str> {
    line.split_whitespace()
        .filter_map(|word| word.split_once('=').map(|(name, _)| name))
        .map(|name| name.rsplit(['{', ':']).next().unwrap_or(name))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_retry_log_line_names_each_field_once() {
    let (logs, _guard) = Logs::capture();
    // Nothing listens on port 1: every send fails to connect, and the
    // target retries twice.
    let toml = one_target("http://127.0.0.1:1", "", "max_retries = 2");
    let gw = gateway(&toml, no_env).await;
    send(post(&gw.url("/v1/messages"), PROMPT)).await;
    let text = logs.text();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("llm-retry:")).collect();
    assert!(lines.len() >= 3, "{text}");
    for line in lines {
        let mut names = field_names(line);
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all, "a field repeated: {line}");
    }
}

#[tokio::test]
async fn an_answer_cut_after_content_is_logged_once_with_route_and_target_and_no_secret() {
    use http_body_util::BodyExt;
    let (logs, _guard) = Logs::capture();
    use llm_retry_mock::{Reply, SseEvent};
    let delta = |text: &str| {
        SseEvent::new(
            Some("content_block_delta"),
            &format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{text}"}}}}"#
            ),
        )
    };
    // The cut comes 200 ms after the first content, in the second event.
    let first = Reply::sse([delta("Hello")]).expected_body().unwrap().len();
    let cut = Reply::sse([
        delta("Hello"),
        delta(" there").after(std::time::Duration::from_millis(200)),
    ])
    .reset_after_bytes(first + 10);
    let upstream = support::target(llm_retry_mock::Route::always(cut)).await;
    let toml = one_target(
        &upstream.url(""),
        "",
        "max_retries = 0\napi_key_env = \"K\"\nauth = \"x-api-key\"",
    );
    let gw = gateway(&toml, |var| {
        (var == "K").then(|| "sk-target-SECRET".to_owned())
    })
    .await;
    let mut request = post(&gw.url("/v1/messages"), PROMPT);
    request
        .headers_mut()
        .insert("x-api-key", "sk-client-SECRET".parse().unwrap());
    let response = support::client().request(request).await.unwrap();
    assert!(response.into_body().collect().await.is_err());
    let text = logs.text();
    assert!(!text.contains("SECRET"), "{text}");
    let problems: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert_eq!(problems.len(), 1, "{text}");
    let line = problems[0];
    assert!(
        line.contains("route=\"r\"")
            && line.contains("target=\"a\"")
            && line.contains("ending=\"upstream_cut\"")
            && line.contains("status=200"),
        "{line}"
    );
}

#[tokio::test]
async fn an_answer_in_the_5xx_class_is_logged_once_at_error_with_no_secret() {
    let (logs, _guard) = Logs::capture();
    let upstream = support::target(llm_retry_mock::Route::always(
        llm_retry_mock::Reply::status(500),
    ))
    .await;
    let toml = one_target(&upstream.url(""), "", "max_retries = 0");
    let gw = gateway(&toml, no_env).await;
    let mut request = post(&gw.url("/v1/messages?key=1"), PROMPT);
    request
        .headers_mut()
        .insert("x-api-key", "sk-client-SECRET".parse().unwrap());
    let (head, _) = send(request).await;
    assert_eq!(head.status, 500);
    let text = logs.text();
    assert!(!text.contains("SECRET"), "{text}");
    let errors: Vec<&str> = text.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(
        errors[0].contains("response failed") && errors[0].contains("status=500"),
        "{}",
        errors[0]
    );
    // A success is not logged at the default level.
    let ok = support::target(llm_retry_mock::Route::always(
        llm_retry_mock::Reply::anthropic_ok("a"),
    ))
    .await;
    let gw = gateway(&one_target(&ok.url(""), "", ""), no_env).await;
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert_eq!(logs.text(), text);
}

/// A client's key in the query string (`?key=…`, as Google's API takes it)
/// is forwarded, never logged: at `debug` too, where the request's span
/// names its path on every line inside it (a 5xx answer's line, the retry
/// loop's).
#[tokio::test]
async fn a_key_in_the_query_string_is_not_logged_at_debug() {
    let (logs, _guard) = Logs::capture_at(tracing::Level::DEBUG);
    let upstream = support::target(llm_retry_mock::Route::always(
        llm_retry_mock::Reply::status(500),
    ))
    .await;
    let toml = one_target(&upstream.url(""), "", "max_retries = 0");
    let gw = gateway(&toml, no_env).await;
    let (head, _) = send(post(&gw.url("/v1/messages?key=AIzaSECRET"), PROMPT)).await;
    assert_eq!(head.status, 500);
    assert_eq!(upstream.request_count(), 1);
    let text = logs.text();
    assert!(text.contains("path=/v1/messages"), "{text}");
    let leaking: Vec<&str> = text.lines().filter(|l| l.contains("SECRET")).collect();
    assert!(leaking.is_empty(), "{}", leaking.join("\n"));
}
