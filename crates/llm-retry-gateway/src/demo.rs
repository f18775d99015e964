//! The self-contained demo: two local mock targets behind one route, the
//! first of them rate-limited, and the lines to try it with.

use crate::config::Config;
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::time::Duration;

/// The demo's mock targets, kept alive while the gateway runs.
#[derive(Debug)]
pub struct Demo {
    /// The gateway's configuration, aimed at the mocks.
    pub config: Config,
    /// The config file text it was parsed from.
    pub text: String,
    /// A target that admits 2 requests a second and answers 429 past it.
    pub busy: MockServer,
    /// A target that answers everything.
    pub spare: MockServer,
}

/// Starts the mock targets and the config for a gateway on `listen`.
pub async fn start(listen: &str) -> std::io::Result<Demo> {
    let script = |route: Route| {
        Script::new()
            .route("/v1/messages", route.clone())
            .route("/v1/chat/completions", route)
    };
    let answer = Route::always(Reply::anthropic_ok("Hello from the gateway demo!"));
    let busy = MockServer::start(script(Route::capacity(
        2,
        2,
        Reply::rate_limited(Some(1)).delay(Duration::from_millis(5)),
        answer.clone(),
    )))
    .await?;
    let spare = MockServer::start(script(answer)).await?;
    let text = format!(
        r#"# The demo's config: one route, two targets in priority order.
listen = "{listen}"
shutdown_grace = "5s"

[[route]]
name = "demo"
max_upstream_sends = 6
deadline = "30s"
exhaustion_retry = {{ max_rounds = 1, max_wait = "2s" }}

[[route.target]]
name = "busy"
base_url = "{busy}"
max_retries = 0
cooldown = true

[[route.target]]
name = "spare"
base_url = "{spare}"
max_retries = 1
"#,
        busy = busy.url(""),
        spare = spare.url(""),
    );
    let config = Config::parse(&text, |_| None).map_err(std::io::Error::other)?;
    Ok(Demo {
        config,
        text,
        busy,
        spare,
    })
}

/// What to paste to try the demo gateway at `base`.
pub fn instructions(base: &str) -> String {
    format!(
        r#"Try it:

  curl -s {base}/v1/messages -H 'content-type: application/json' \
    -d '{{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{{"role":"user","content":"Hi"}}]}}'

  for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{{http_code}}\n' {base}/v1/messages -d '{{"model":"m"}}'; done

  ANTHROPIC_BASE_URL={base} ANTHROPIC_API_KEY=demo python -c "import anthropic; print(anthropic.Anthropic().messages.create(model='claude-sonnet-4-5', max_tokens=64, messages=[{{'role':'user','content':'Hi'}}]).content[0].text)"

  curl -s {base}/metrics | grep llm_retry

Ctrl-C drains and stops."#
    )
}
