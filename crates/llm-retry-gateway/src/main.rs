//! `llm-retry-gateway`: see the crate docs and `docs/gateway.md`.

use llm_retry_gateway::{demo, Config, Gateway};
use std::process::ExitCode;

const USAGE: &str = "usage: llm-retry-gateway [--config gateway.toml [--check-config]]

  --config FILE     serve the routes in FILE (see docs/gateway.md)
  --check-config    validate FILE and exit (0 when valid)
  (no arguments)    a self-contained demo: two local mock targets, one rate-limited";

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut config_path = None;
    let mut check = false;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--config" => config_path = iter.next().cloned(),
            "--check-config" => check = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    match (config_path, check) {
        (Some(path), check) => run_file(&path, check).await,
        (None, true) => {
            eprintln!("--check-config needs --config FILE\n{USAGE}");
            ExitCode::from(2)
        }
        (None, false) => run_demo().await,
    }
}

async fn run_file(path: &str, check: bool) -> ExitCode {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("{path}: {error}");
            return ExitCode::from(2);
        }
    };
    let config = match Config::parse(&text, |var| std::env::var(var).ok()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{path}: {error}");
            return ExitCode::from(2);
        }
    };
    if check {
        println!("{path}: ok ({} routes)", config.routes.len());
        return ExitCode::SUCCESS;
    }
    serve(&config).await
}

async fn run_demo() -> ExitCode {
    let listen =
        std::env::var("LLM_RETRY_GATEWAY_LISTEN").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let demo = match demo::start(&listen).await {
        Ok(demo) => demo,
        Err(error) => {
            eprintln!("demo: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", demo.text);
    println!("{}", demo::instructions(&format!("http://{listen}")));
    serve(&demo.config).await
}

async fn serve(config: &Config) -> ExitCode {
    let handle = match llm_retry_gateway::prometheus().install_recorder() {
        Ok(handle) => Some(handle),
        Err(error) => {
            eprintln!("metrics: {error}");
            None
        }
    };
    let mut gateway = match Gateway::new(config) {
        Ok(gateway) => gateway,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(handle) = handle {
        gateway = gateway.with_metrics(handle);
    }
    if let Some(shared) = &config.shared {
        let mode = match shared.failure_mode {
            llm_retry_gateway::FailureMode::FailClosed => "fail_closed",
            _ => "fail_open",
        };
        // The URL redacted: never its password.
        eprintln!(
            "sharing retry budgets and failover marks through {} ({} replicas, {mode})",
            shared.redis_url, shared.replicas
        );
        // Start with the fleet's marks; each call is bounded by the timeout.
        if !gateway.sync_shared().await {
            eprintln!("redis did not answer: deciding locally until it does");
        }
    }
    let listener = match llm_retry_gateway::listen(config.listen) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("{}: {error}", config.listen);
            return ExitCode::FAILURE;
        }
    };
    eprintln!("llm-retry-gateway listening on http://{}", config.listen);
    // The first signal drains; a second one exits at once.
    let signal = async {
        shutdown_signal().await;
        eprintln!("draining (a second signal exits at once)");
        tokio::spawn(async {
            shutdown_signal().await;
            eprintln!("second signal: exiting without waiting for requests in flight");
            std::process::exit(130);
        });
    };
    match gateway.serve(listener, signal).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// Ctrl-C, or SIGTERM on Unix.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
