//! The benchmark's parameters: command line, `STORM_*` variables, defaults.

use llm_retry::BoxError;
use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) capacity: u32,
    pub(crate) burst: u32,
    pub(crate) clients: usize,
    pub(crate) requests: usize,
    pub(crate) seed: u64,
    pub(crate) latency: Duration,
    pub(crate) outage: Duration,
    pub(crate) docs: Option<PathBuf>,
    /// Run only the policies whose label contains this (no docs written).
    pub(crate) only: Option<String>,
    /// Run only the scenarios whose label contains this (no docs written).
    pub(crate) scenarios: Option<String>,
    /// A token quota the known-quota row is told: per minute, burst.
    pub(crate) known_tokens: Option<(u32, u32)>,
}

const USAGE: &str = "\
usage: cargo run --release --example storm -- [options]

  --capacity N     upstream capacity C, requests/s         (STORM_CAPACITY, 200)
  --burst N        token bucket burst                      (STORM_BURST, 10)
  --clients N      concurrent closed-loop clients          (STORM_CLIENTS, 200)
  --requests N     logical requests per client             (STORM_REQUESTS, 10)
  --seed N         seed of the modelled policies' jitter   (STORM_SEED, 2026)
  --latency-ms N   upstream response time, every reply     (STORM_LATENCY_MS, 20)
  --outage-secs N  length of the 503 window                (STORM_OUTAGE_SECS, 3)
  --docs DIR       where storm.md and storm.svg go         (STORM_DOCS, <workspace>/docs)
  --no-docs        print only, write nothing
  --only TEXT      run only the policies whose label contains TEXT; writes nothing
                                                           (STORM_ONLY)
  --scenario TEXT  run only the scenarios whose label contains TEXT; writes nothing
                                                           (STORM_SCENARIO)
";

/// Option names and their environment variables.
const OPTIONS: [(&str, &str); 10] = [
    ("capacity", "STORM_CAPACITY"),
    ("burst", "STORM_BURST"),
    ("clients", "STORM_CLIENTS"),
    ("requests", "STORM_REQUESTS"),
    ("seed", "STORM_SEED"),
    ("latency-ms", "STORM_LATENCY_MS"),
    ("outage-secs", "STORM_OUTAGE_SECS"),
    ("docs", "STORM_DOCS"),
    ("only", "STORM_ONLY"),
    ("scenario", "STORM_SCENARIO"),
];

impl Config {
    /// The defaults, writing nowhere.
    pub(crate) fn defaults() -> Config {
        Config {
            capacity: 200,
            burst: 10,
            clients: 200,
            requests: 10,
            seed: 2026,
            latency: Duration::from_millis(20),
            outage: Duration::from_secs(3),
            docs: None,
            only: None,
            scenarios: None,
            known_tokens: None,
        }
    }

    /// Reads the environment, then the arguments (which win). `Ok(None)`
    /// after `--help`.
    pub(crate) fn from_env_and_args() -> Result<Option<Config>, BoxError> {
        let mut values: HashMap<String, String> = HashMap::new();
        for (name, var) in OPTIONS {
            if let Ok(value) = std::env::var(var) {
                values.insert(name.to_owned(), value);
            }
        }
        let mut no_docs = false;
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "-h" | "--help" => {
                    print!("{USAGE}");
                    return Ok(None);
                }
                "--no-docs" => no_docs = true,
                _ => {
                    let Some(flag) = arg.strip_prefix("--") else {
                        return Err(format!("unexpected argument {arg:?}\n\n{USAGE}").into());
                    };
                    let (name, value) = match flag.split_once('=') {
                        Some((name, value)) => (name.to_owned(), value.to_owned()),
                        None => {
                            let value = args
                                .next()
                                .ok_or_else(|| format!("--{flag} needs a value"))?;
                            (flag.to_owned(), value)
                        }
                    };
                    values.insert(name, value);
                }
            }
        }
        if let Some(name) = values
            .keys()
            .find(|k| !OPTIONS.iter().any(|(name, _)| name == k))
        {
            return Err(format!("unknown option --{name}\n\n{USAGE}").into());
        }
        fn num<T: std::str::FromStr>(
            values: &HashMap<String, String>,
            name: &str,
            default: T,
        ) -> Result<T, BoxError> {
            match values.get(name) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| format!("--{name}: not a number: {v:?}").into()),
            }
        }
        let d = Config::defaults();
        let config = Config {
            capacity: num(&values, "capacity", d.capacity)?,
            burst: num(&values, "burst", d.burst)?,
            clients: num(&values, "clients", d.clients)?,
            requests: num(&values, "requests", d.requests)?,
            seed: num(&values, "seed", d.seed)?,
            latency: Duration::from_millis(num(&values, "latency-ms", 20)?),
            outage: Duration::from_secs_f64(num(&values, "outage-secs", 3.0)?),
            only: values.get("only").filter(|o| !o.is_empty()).cloned(),
            scenarios: values.get("scenario").filter(|o| !o.is_empty()).cloned(),
            known_tokens: None,
            docs: match (
                no_docs || values.contains_key("only") || values.contains_key("scenario"),
                values.get("docs"),
            ) {
                (true, _) => None,
                (false, Some(dir)) if dir.is_empty() => None,
                (false, Some(dir)) => Some(PathBuf::from(dir)),
                (false, None) => Some(PathBuf::from(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../docs"
                ))),
            },
        };
        if config.capacity == 0 || config.clients == 0 || config.requests == 0 {
            return Err("capacity, clients and requests must be at least 1".into());
        }
        if config.outage >= config.ideal_duration() {
            return Err("the outage must be shorter than the ideal run".into());
        }
        Ok(Some(config))
    }

    /// Whether `label`'s policy runs.
    pub(crate) fn runs(&self, label: &str) -> bool {
        matches(self.only.as_deref(), label)
    }

    /// Whether `label`'s scenario runs.
    pub(crate) fn runs_scenario(&self, label: &str) -> bool {
        matches(self.scenarios.as_deref(), label)
    }

    pub(crate) fn logical_requests(&self) -> usize {
        self.clients * self.requests
    }

    /// How long the fixed workload takes at exactly C.
    pub(crate) fn ideal_duration(&self) -> Duration {
        Duration::from_secs_f64(self.logical_requests() as f64 / f64::from(self.capacity))
    }

    /// The 503 window of the outage scenario: centred in the ideal run.
    pub(crate) fn outage_window(&self) -> Range<Duration> {
        let start = (self.ideal_duration() - self.outage) / 2;
        start..start + self.outage
    }

    /// The command that reproduces this run: only non-default options.
    pub(crate) fn command(&self) -> String {
        let d = Config::defaults();
        let mut flags = Vec::new();
        if self.capacity != d.capacity {
            flags.push(format!("--capacity {}", self.capacity));
        }
        if self.burst != d.burst {
            flags.push(format!("--burst {}", self.burst));
        }
        if self.clients != d.clients {
            flags.push(format!("--clients {}", self.clients));
        }
        if self.requests != d.requests {
            flags.push(format!("--requests {}", self.requests));
        }
        if self.seed != d.seed {
            flags.push(format!("--seed {}", self.seed));
        }
        if self.latency != d.latency {
            flags.push(format!("--latency-ms {}", self.latency.as_millis()));
        }
        if self.outage != d.outage {
            flags.push(format!("--outage-secs {}", self.outage.as_secs_f64()));
        }
        let mut cmd = "cargo run --release --example storm".to_owned();
        if !flags.is_empty() {
            cmd.push_str(" -- ");
            cmd.push_str(&flags.join(" "));
        }
        cmd
    }
}

/// Whether `label` passes a `--only`/`--scenario` filter (none: all do).
fn matches(filter: Option<&str>, label: &str) -> bool {
    filter.is_none_or(|text| label.contains(text))
}
