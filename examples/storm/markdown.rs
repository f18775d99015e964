//! docs/storm.md: the machine, the setup, the tables, the findings and
//! the targets, in that order.

use crate::config::Config;
use crate::findings::findings;
use crate::policies::Policy;
use crate::stats::Run;
use crate::tables::{outage_table, outcomes_list, rate_limit_table};
use crate::targets::targets;
use std::fmt::Write as _;

/// Machine facts for the report.
pub(crate) struct Machine {
    pub(crate) cores: usize,
    pub(crate) cpu: String,
    load: String,
}

pub(crate) fn machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned());
    Machine {
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu,
        load,
    }
}

/// Today's date (UTC) as `YYYY-MM-DD`, from the system clock.
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (year, month, day) = civil(secs / 86_400);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The UTC instant `secs` after the Unix epoch as RFC 3339, whole seconds
/// (`2026-12-03T12:00:00Z`), the way Anthropic states a reset.
pub(crate) fn rfc3339(secs: u64) -> String {
    let (year, month, day) = civil(secs / 86_400);
    let rest = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// The civil date (year, month, day) of a day number since the Unix epoch
/// (Howard Hinnant's civil_from_days).
fn civil(days: u64) -> (i64, i64, i64) {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn setup(md: &mut String, config: &Config) {
    let window = config.outage_window();
    let _ = writeln!(md, "## Setup\n");
    let _ = writeln!(
        md,
        "- Upstream: `llm-retry-mock`, one route behind `Route::capacity({}, {}, …)`: \
         a token bucket of C = {} requests/s, bursts of {}, shared by every connection. \
         When it is empty the answer is Anthropic's `429 rate_limit_error` with the exact \
         time until the next token as `retry-after-ms` and `Retry-After` (seconds, rounded up). \
         Every reply (200, 429, 503) takes {} ms.",
        config.capacity,
        config.burst,
        config.capacity,
        config.burst,
        config.latency.as_millis()
    );
    let _ = writeln!(
        md,
        "- Clients: {} closed-loop clients; each starts its next logical request as soon as \
         the previous one ended, success or failure. Per row and scenario, one connection \
         pool and one middleware stack (one retry budget, one gate) are built and every \
         client sends through a clone of them: the budget and the gate see all {} clients, \
         and no state carries over from one row or scenario to the next.",
        config.clients, config.clients
    );
    let _ = writeln!(
        md,
        "- Rate limiting: {} requests per client, {} in all: {:.0} s at exactly C.",
        config.requests,
        config.logical_requests(),
        config.ideal_duration().as_secs_f64()
    );
    let _ = writeln!(
        md,
        "- Outage: the same clients in a closed loop for {:.0} s; every request arriving \
         between {:.1} s and {:.1} s after the upstream started gets `503 api_error` \
         (`Route::outage`), the bucket applies before and after.",
        config.ideal_duration().as_secs_f64(),
        window.start.as_secs_f64(),
        window.end.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "- Policies, one after the other, each against a fresh upstream (the first three rows \
         are the middleware itself, the last three are models of other clients):"
    );
    for (i, policy) in Policy::ALL.iter().enumerate() {
        let _ = writeln!(md, "  {}. {}", i + 1, policy.describe(config));
    }
    let _ = writeln!(
        md,
        "- Seed {} for the models' jitter (the middleware draws its own).",
        config.seed
    );
}

pub(crate) fn markdown(config: &Config, machine: &Machine, rate: &[Run], outage: &[Run]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Storm benchmark\n");
    let _ = writeln!(
        md,
        "What client retry policies do to an upstream that is at capacity, or down: the \
         middleware's recommended stack (retries with a shared retry budget over a \
         rate-limit gate that learns the rate), the same stack with a gate told the quota, \
         its retry layer alone, and three other clients' retries; then the same rows \
         against provider-shaped limits, and against shapes where a gate has nothing to act \
         on and must cost nothing. Generated by `examples/storm/`; regenerate with:\n"
    );
    let _ = writeln!(md, "```sh\n{}\n```\n", config.command());
    let _ = writeln!(
        md,
        "Run on {} on {} (nproc = {}, load average {} when it started), \
         client and upstream in one process on loopback. Numbers move by a few \
         percent between runs, so a verdict close to its threshold can flip.\n",
        today(),
        machine.cpu,
        machine.cores,
        machine.load
    );
    let _ = writeln!(
        md,
        "![goodput, amplification and outage load per policy](storm.svg)\n"
    );
    setup(&mut md, config);
    let _ = writeln!(md, "\n## Rate limiting\n");
    md.push_str(&rate_limit_table(config, rate));
    let _ = writeln!(
        md,
        "\nGoodput: successes per second of the run ÷ C (the bucket's initial burst lets a \
         very short run exceed 100 %). Sends per request: upstream sends (the server's own \
         log) ÷ logical requests. Latency: from a logical request's start to its final \
         answer, success or not, waits in the gate included. Lost / duplicated: logical \
         requests that ended in no result or more than one, plus request ids the upstream \
         answered with a success twice.\n"
    );
    let _ = writeln!(
        md,
        "How the requests ended (for the middleware, why it stopped is in parentheses):\n"
    );
    md.push_str(&outcomes_list(rate));
    let _ = writeln!(md, "\n## Outage\n");
    md.push_str(&outage_table(outage));
    let _ = writeln!(
        md,
        "\nOffered before: new logical requests per second before the window. Load during ÷ \
         offered before: upstream sends per second inside the window ÷ that rate (1.00 = the \
         outage costs the upstream nothing beyond its normal load). Retries per new request: \
         sends inside the window that were not a request's first, per first send inside it \
         — the number a retry budget caps. Last answer: when the last request that started \
         before the {:.0} s mark got its final answer.\n",
        config.ideal_duration().as_secs_f64()
    );
    let _ = writeln!(md, "How the requests ended:\n");
    md.push_str(&outcomes_list(outage));
    md.push_str(&findings(config, rate, outage));
    md.push_str(&targets(config, rate, outage));
    md
}
