//! The report's markdown tables and lists, and the number formats they share.

use crate::config::Config;
use crate::stats::Run;
use std::fmt::Write as _;
use std::time::Duration;

pub(crate) fn ms(d: Duration) -> String {
    if d == crate::stats::CUT_OFF {
        return "cut off".to_owned();
    }
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

pub(crate) fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// `0 / 0`, or lost / duplicated with a warning sign.
pub(crate) fn integrity(run: &Run) -> String {
    if run.clean() {
        "0 / 0".to_owned()
    } else {
        format!(
            "{} / {} ⚠",
            run.lost,
            run.duplicated_results + run.duplicated_upstream
        )
    }
}

pub(crate) fn rate_limit_table(config: &Config, runs: &[Run]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| policy | goodput (÷ C) | sends per request | success | p50 latency | p99 latency | run | lost / duplicated |"
    );
    let _ = writeln!(t, "|---|--:|--:|--:|--:|--:|--:|--:|");
    for run in runs {
        let _ = writeln!(
            t,
            "| {} | {} | {:.2} | {} ({}/{}) | {} | {} | {:.1} s | {} |",
            run.policy.label(),
            pct(run.goodput(config.capacity)),
            run.amplification(),
            pct(run.success_rate()),
            run.succeeded,
            run.logical,
            ms(run.p50),
            ms(run.p99),
            run.duration.as_secs_f64(),
            integrity(run),
        );
    }
    t
}

pub(crate) fn outage_table(runs: &[Run]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| policy | offered before (new req/s) | sends/s during outage | load during ÷ offered before | retries per new request during | success | sends per request | last answer | lost / duplicated |"
    );
    let _ = writeln!(t, "|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    for run in runs {
        let Some(load) = &run.outage else { continue };
        let retries = load
            .retries_per_new_request()
            .map_or_else(|| "— (no new requests)".to_owned(), |r| format!("{r:.2}"));
        let _ = writeln!(
            t,
            "| {} | {:.0} | {:.0} | {:.2} | {} | {} ({}/{}) | {:.2} | {:.1} s | {} |",
            run.policy.label(),
            load.offered_before,
            load.sends_during,
            load.ratio(),
            retries,
            pct(run.success_rate()),
            run.succeeded,
            run.logical,
            run.amplification(),
            run.duration.as_secs_f64(),
            integrity(run),
        );
    }
    t
}

/// Per run, its most common endings.
pub(crate) fn outcomes_list(runs: &[Run]) -> String {
    let mut t = String::new();
    for run in runs {
        let mut outcomes: Vec<(&String, &usize)> = run.outcomes.iter().collect();
        outcomes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let list: Vec<String> = outcomes
            .iter()
            .take(6)
            .map(|(why, n)| format!("{n} × {why}"))
            .collect();
        let more = outcomes.len().saturating_sub(6);
        let _ = writeln!(
            t,
            "- {}: {}{}",
            run.policy.label(),
            list.join(", "),
            if more > 0 {
                format!(", and {more} other outcomes")
            } else {
                String::new()
            }
        );
    }
    t
}
