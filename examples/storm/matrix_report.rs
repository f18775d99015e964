//! The provider-shaped half of the report: one table per scenario, the
//! targets of the recommended stack in each, and a summary matrix.

use crate::config::Config;
use crate::matrix::Shaped;
use crate::policies::Policy;
use crate::stacks::Stack;
use crate::stats::Run;
use crate::tables::{integrity, ms, outcomes_list, pct};
use std::fmt::Write as _;
use std::time::Duration;

/// Sends per request, as a multiple of what the scenario forces.
const TARGET_SENDS: f64 = 1.1;
/// Completion time, as a multiple of the capacity bound.
const TARGET_TIME: f64 = 1.2;

/// One run against what its scenario allows.
struct Cell<'a> {
    run: &'a Run,
    forced: f64,
    bound: Duration,
    /// The largest share any client can have served (the target).
    most_served: f64,
}

impl Cell<'_> {
    fn sends_ratio(&self) -> f64 {
        self.run.amplification() / self.forced
    }

    fn time_ratio(&self) -> f64 {
        self.run.duration.as_secs_f64() / self.bound.as_secs_f64().max(1e-9)
    }

    /// Whether each target is met: served, sends, time, integrity.
    fn verdicts(&self) -> [bool; 4] {
        [
            // One request in a thousand of slack for float rounding.
            self.run.success_rate() >= self.most_served - 0.001,
            self.sends_ratio() <= TARGET_SENDS,
            self.time_ratio() <= TARGET_TIME,
            self.run.clean(),
        ]
    }
}

/// The classic rate-limit scenario, in the matrix's terms.
fn classic(config: &Config) -> (f64, Duration) {
    let burst = f64::from(config.burst);
    let forced = crate::matrix::forced_beyond(config, burst);
    let secs = crate::matrix::rate_secs(config, f64::from(config.capacity), burst);
    (
        forced,
        Duration::from_secs_f64(secs + config.latency.as_secs_f64()),
    )
}

/// The share served, and (in the row the target is for) the most a
/// client not told the quota could have served, where that is less than
/// all.
fn served_text(cell: &Cell<'_>) -> String {
    let run = cell.run;
    let served = format!(
        "{} ({}/{})",
        pct(run.success_rate()),
        run.succeeded,
        run.logical
    );
    if cell.most_served < 1.0 && run.policy == Policy::Middleware(Stack::Defaults) {
        format!("{served}, at most {}", pct(cell.most_served))
    } else {
        served
    }
}

fn mark(text: String, ok: bool) -> String {
    if ok {
        format!("{text} ✓")
    } else {
        format!("**{text} ✗**")
    }
}

fn cells<'a>(
    runs: &'a [Run],
    forced: f64,
    bound: Duration,
    most_served: impl Fn(&Run) -> f64,
) -> Vec<Cell<'a>> {
    runs.iter()
        .map(|run| Cell {
            run,
            forced,
            bound,
            most_served: most_served(run),
        })
        .collect()
}

fn table(cells: &[Cell<'_>]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| policy | served | sends per request (÷ forced) | completion (÷ bound) | p50 | p99 | lost / duplicated |"
    );
    let _ = writeln!(t, "|---|--:|--:|--:|--:|--:|--:|");
    for cell in cells {
        let run = cell.run;
        let defaults = run.policy == Policy::Middleware(Stack::Defaults);
        let [served, sends, time, clean] = cell.verdicts();
        let show = |text: String, ok: bool| if defaults { mark(text, ok) } else { text };
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} |",
            run.policy.label(),
            show(served_text(cell), served),
            show(
                format!("{:.2} ({:.2}×)", run.amplification(), cell.sends_ratio()),
                sends
            ),
            show(
                format!(
                    "{:.1} s ({:.2}×)",
                    run.duration.as_secs_f64(),
                    cell.time_ratio()
                ),
                time
            ),
            ms(run.p50),
            ms(run.p99),
            show(integrity(run), clean),
        );
    }
    t
}

/// A short table for the terminal, after each scenario.
pub(crate) fn brief(config: &Config, scenario: Shaped, runs: &[Run]) -> String {
    let forced = scenario.forced_sends(config);
    let bound = scenario.bound(config);
    let mut t = format!(
        "  forced {:.2} sends per request, bound {:.2} s\n",
        forced,
        bound.as_secs_f64()
    );
    for cell in cells(runs, forced, bound, |run| {
        scenario.most_served_in(config, run)
    }) {
        let run = cell.run;
        let failed: Vec<String> = run
            .outcomes
            .iter()
            .filter(|(why, _)| why.as_str() != "200")
            .map(|(why, n)| format!("{n} × {why}"))
            .collect();
        let _ = writeln!(
            t,
            "    {:<34} served {}  sends {:.2} ({:.2}×)  time {:>5.1} s ({:.2}×)  p99 {}  {}",
            run.policy.label(),
            served_text(&cell),
            run.amplification(),
            cell.sends_ratio(),
            run.duration.as_secs_f64(),
            cell.time_ratio(),
            ms(run.p99),
            integrity(run),
        );
        if !failed.is_empty() {
            let _ = writeln!(t, "      {}", failed.join(", "));
        }
    }
    t
}

/// The matrix section of docs/storm.md.
pub(crate) fn matrix(
    config: &Config,
    rate: &[Run],
    shaped: &[(Shaped, Config, Vec<Run>)],
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "\n## Provider-shaped scenarios\n");
    let _ = writeln!(
        md,
        "Real providers do not answer like scenario 1's bucket. Each scenario below is one \
         `Route::limited` upstream of `llm-retry-mock`, shaped like a provider, with its own \
         clients and capacity; every row runs against a fresh upstream, in the same run. \
         *Forced* is the fewest sends per request a client that is not told the quota can \
         make: the first wave goes out before any answer came back, and what the upstream cannot admit at once is \
         refused. The *bound* is the shortest time the work can take: the requests (or \
         tokens) beyond what is admitted at once over the capacity, plus the waits the \
         scenario forces, plus one reply. Targets for **llm-retry defaults**, marked in its \
         row: every request served that a client not told the quota could have served, \
         sends ≤ {TARGET_SENDS} × forced, completion ≤ {TARGET_TIME} × the bound, nothing lost or \
         duplicated. Every request honours a deadline of 300 s, so every bound fits.\n"
    );
    let (forced, bound) = classic(config);
    let mut summary: Vec<(String, Vec<Cell<'_>>)> = vec![(
        "1. exact bucket".to_owned(),
        cells(rate, forced, bound, |_| 1.0),
    )];
    for (scenario, cell_config, runs) in shaped {
        let forced = scenario.forced_sends(cell_config);
        let bound = scenario.bound(cell_config);
        let _ = writeln!(md, "### {}. {}\n", scenario.number(), scenario.label());
        let _ = writeln!(md, "{}\n", scenario.describe());
        let _ = writeln!(
            md,
            "Forced: {forced:.2} sends per request; bound: {:.2} s.\n",
            bound.as_secs_f64()
        );
        let most_served = scenario.most_served(cell_config);
        if most_served < 1.0 {
            let _ = writeln!(
                md,
                "A client not told the quota can have no more than {} served here: its \
                 first wave's refusals are final. In a run, so is every refused send \
                 that went before the first refusal came back to the client (a request \
                 the first wave served is followed at once by its client's next, which \
                 can go before any refusal came back): each run's ceiling is the smaller \
                 share, shown as *at most*.\n",
                pct(most_served)
            );
        }
        let row = cells(runs, forced, bound, |run| {
            scenario.most_served_in(cell_config, run)
        });
        md.push_str(&table(&row));
        let _ = writeln!(md, "\nOutcomes:\n\n{}", outcomes_list(runs));
        summary.push((format!("{}. {}", scenario.number(), scenario.label()), row));
    }

    let _ = writeln!(md, "### Summary\n");
    let _ = writeln!(
        md,
        "Each cell: served · sends per request ÷ forced · completion ÷ bound. Scenario 8, the \
         outage, is measured by its own table above (load during the window).\n"
    );
    let mut header = "| policy |".to_owned();
    let mut rule = "|---|".to_owned();
    for (name, _) in &summary {
        let _ = write!(header, " {name} |");
        rule.push_str("--:|");
    }
    let _ = writeln!(md, "{header}\n{rule}");
    for (i, policy) in Policy::ALL.iter().enumerate() {
        let mut line = format!("| {} |", policy.label());
        for (_, row) in &summary {
            match row.iter().find(|c| c.run.policy == *policy) {
                Some(c) => {
                    let text = format!(
                        "{} · {:.2} · {:.2}",
                        pct(c.run.success_rate()),
                        c.sends_ratio(),
                        c.time_ratio()
                    );
                    let all = c.verdicts().iter().all(|v| *v);
                    let _ = write!(line, " {} |", if i == 0 { mark(text, all) } else { text });
                }
                None => line.push_str(" — |"),
            }
        }
        let _ = writeln!(md, "{line}");
    }
    let missed: Vec<&str> = summary
        .iter()
        .filter(|(_, row)| {
            row.iter()
                .find(|c| c.run.policy == Policy::Middleware(Stack::Defaults))
                .is_some_and(|c| !c.verdicts().iter().all(|v| *v))
        })
        .map(|(name, _)| name.as_str())
        .collect();
    let _ = writeln!(
        md,
        "\n**llm-retry defaults** misses a target in {} of {} scenarios{}.",
        missed.len(),
        summary.len(),
        if missed.is_empty() {
            String::new()
        } else {
            format!(": {}", missed.join("; "))
        }
    );
    md
}
