//! The storm benchmark: what retry policies do to an upstream that is at
//! capacity, or down, and whether a gate costs anything where no gate is
//! needed.
//!
//! ```text
//! cargo run --release --example storm            # a few minutes; writes docs/storm.md and docs/storm.svg
//! cargo run --release --example storm -- --help  # options (also as STORM_* environment variables)
//! ```
//!
//! # What it models
//!
//! The upstream is `llm-retry-mock` on 127.0.0.1: one route behind
//! `Route::capacity`, a token bucket of C requests per second (default
//! 200, bursts of 10) that answers Anthropic's `429 rate_limit_error` with
//! the exact time until the next token as `retry-after-ms` and `Retry-After`
//! (whole seconds, rounded up) when it is empty. Every reply — 200, 429 or
//! 503 — takes the same fixed response time (default 20 ms), standing in
//! for the network and the provider's front door ([`scenario`]).
//!
//! N closed-loop clients (default 200) each send their next logical
//! request as soon as the previous one ended, in success or failure. The
//! same workload runs once per policy ([`policies`]), one policy after the
//! other, each against a fresh upstream (full bucket, fresh clock), with a
//! fresh stack that all N clients share ([`run`]):
//!
//! - the real middleware ([`stacks`]): `ClientLayer::default()`, the
//!   recommended stack (retries with a shared retry budget over a gate that
//!   learns each key's rate from its 429s); `RetryLayer` alone, the same
//!   retries and budget without a gate; and `ClientLayer` with a gate told
//!   the upstream's quota;
//! - models of other clients ([`models`]): reqwest-retry's default, the
//!   official Anthropic/OpenAI SDKs' default, and no retries.
//!
//! Two scenarios: **rate limiting**, a fixed number of requests per client
//! (2 000 requests, 10 s at exactly C, by default), and **outage**, the
//! same clients closed-loop for that long while the upstream answers `503`
//! to everything for a window in the middle (3 s by default). Every logical
//! request must end in exactly one result (counted per request id, sent as
//! `x-storm-request`), and the upstream must have answered no request id
//! with a success twice ([`stats`]).
//!
//! Then a matrix of scenarios, each with its own upstream and workload:
//!
//! - **provider-shaped limits** (2 to 7, and 9; [`matrix`],
//!   [`matrix_report`]): `Route::limited` upstreams shaped like Anthropic,
//!   OpenAI, Azure OpenAI, a spent window, a token quota, an in-flight
//!   ceiling and a gateway, each measured against what it forces on any
//!   client (the fewest sends, the shortest time);
//! - **shapes a gate must not make worse** (10 to 13; [`harm`],
//!   [`harm_report`]): 429s to a random 15 % of answers whatever the rate
//!   (with `retry-after: 1`, and with no wait named), a burst of 200 under
//!   OpenAI's and Anthropic's heads stating a large quota with room left,
//!   one model held for 5 s on a key whose other model is free
//!   (`Route::by_model`; only this scenario's bodies name other models, one
//!   per client), and 529s to a random 10 % whatever the concurrency. Each
//!   is measured against the row without a gate (`RetryLayer` alone, or no
//!   retries where nothing is refused), and stopped 60 s after its upstream
//!   started. A burst's run lasts tens of milliseconds, so each row of 11
//!   is run five times, interleaved with the other rows, and the run with
//!   the median completion is reported.
//!
//! `--scenario TEXT` runs only the scenarios whose label contains TEXT
//! (for instance `--scenario "random 429s"`), `--only TEXT` only those
//! policies; either writes nothing.
//!
//! The project's targets: goodput ≥ 95 % of C, amplification ≤ 1.2,
//! outage load within a retry budget (20 % + 10 retries/s, Finagle's),
//! zero requests lost or duplicated ([`targets`]); per matrix scenario, the
//! recommended stack's targets against its bound, or against its baseline
//! row. The report is [`markdown`] (with [`tables`], [`findings`],
//! [`findings_outage`], [`matrix_report`] and [`harm_report`]) and [`svg`].

mod config;
mod findings;
mod findings_outage;
mod harm;
mod harm_report;
mod markdown;
mod matrix;
mod matrix_report;
mod models;
mod policies;
#[path = "../support/progress.rs"]
mod progress;
mod run;
mod scenario;
mod stacks;
mod stats;
mod svg;
mod tables;
mod targets;
mod upstream;

use config::Config;
use harm::Harm;
use llm_retry::BoxError;
use matrix::Shaped;
use policies::Policy;
use scenario::Scenario;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let config = match Config::from_env_and_args() {
        Ok(Some(config)) => config,
        Ok(None) => return Ok(()),
        Err(e) => {
            eprintln!("storm: {e}");
            std::process::exit(2);
        }
    };
    let machine = markdown::machine();
    let window = config.outage_window();
    eprintln!(
        "storm: C = {} req/s (burst {}), {} clients × {} requests, {} ms per reply, seed {}; \
         {} cores, {}",
        config.capacity,
        config.burst,
        config.clients,
        config.requests,
        config.latency.as_millis(),
        config.seed,
        machine.cores,
        machine.cpu
    );
    eprintln!(
        "rate limiting ({} requests per policy):",
        config.logical_requests()
    );
    let mut rate = Vec::new();
    if config.runs_scenario(Scenario::RateLimit.label()) {
        for policy in Policy::ALL.into_iter().filter(|p| config.runs(p.label())) {
            rate.push(run::run(&config, policy, Scenario::RateLimit).await?);
        }
    }
    eprintln!(
        "outage ({:.0} s closed loop, 503 from {:.1} s to {:.1} s):",
        config.ideal_duration().as_secs_f64(),
        window.start.as_secs_f64(),
        window.end.as_secs_f64()
    );
    let mut outage = Vec::new();
    if config.runs_scenario(Scenario::Outage.label()) {
        for policy in Policy::ALL.into_iter().filter(|p| config.runs(p.label())) {
            outage.push(run::run(&config, policy, Scenario::Outage).await?);
        }
    }
    let mut shaped = Vec::new();
    for scenario in Shaped::ALL
        .into_iter()
        .filter(|s| config.runs_scenario(s.label()))
    {
        let cell_config = scenario.config(&config);
        eprintln!("{} ({}):", scenario.label(), cell_config.logical_requests());
        let mut runs = Vec::new();
        for policy in Policy::ALL.into_iter().filter(|p| config.runs(p.label())) {
            runs.push(run::run(&cell_config, policy, Scenario::Shaped(scenario)).await?);
        }
        eprint!("{}", matrix_report::brief(&cell_config, scenario, &runs));
        shaped.push((scenario, cell_config, runs));
    }
    let mut harms = Vec::new();
    for harm in Harm::ALL
        .into_iter()
        .filter(|h| config.runs_scenario(h.label()))
    {
        let cell_config = harm.config(&config);
        eprintln!(
            "{}. {} ({} clients × {} requests, {} ms per reply):",
            harm.number(),
            harm.label(),
            cell_config.clients,
            cell_config.requests,
            cell_config.latency.as_millis()
        );
        let policies: Vec<Policy> = Policy::ALL
            .into_iter()
            .filter(|p| config.runs(p.label()))
            .collect();
        // Every row's runs interleaved, so a slow spell of the machine
        // falls on all rows alike.
        let mut trials: Vec<Vec<stats::Run>> = policies.iter().map(|_| Vec::new()).collect();
        for _ in 0..harm.repeats() {
            for (policy, trials) in policies.iter().zip(&mut trials) {
                trials.push(run::run(&cell_config, *policy, Scenario::Harm(harm)).await?);
            }
        }
        let runs: Vec<stats::Run> = trials.into_iter().map(stats::median_run).collect();
        eprint!("{}", harm_report::brief(harm, &runs));
        harms.push((harm, runs));
    }
    if rate.is_empty() || outage.is_empty() {
        return Ok(());
    }

    let mut md = markdown::markdown(&config, &machine, &rate, &outage);
    md.push_str(&matrix_report::matrix(&config, &rate, &shaped));
    md.push_str(&harm_report::section(&harms));
    println!("{md}");
    if let Some(dir) = &config.docs {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("storm.md"), &md)?;
        std::fs::write(dir.join("storm.svg"), svg::svg(&config, &rate, &outage))?;
        eprintln!(
            "wrote {} and {}",
            dir.join("storm.md").display(),
            dir.join("storm.svg").display()
        );
    }
    Ok(())
}
