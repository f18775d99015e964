//! One `warn` per outage, an `info` when it ends, and the gauge.
#![allow(clippy::unwrap_used)]

use super::*;
use std::io::Write;
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` and returns the log lines it wrote.
fn logged(f: impl FnOnce()) -> Vec<String> {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let logs = logs.clone();
            move || logs.clone()
        })
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    text.lines().map(str::to_owned).collect()
}

/// The tests here take turns: a callsite first reached on a thread with no
/// subscriber, while another thread installs one, may be missed by it.
static TURNS: Mutex<()> = Mutex::new(());

fn health() -> Health {
    Health::new("budget", StateName::new("claude/primary").unwrap())
}

#[test]
fn an_outage_is_logged_once_and_its_end_once() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    let health = health();
    let lines = logged(|| {
        assert!(!health.is_shared(), "not before Redis answers");
        // The first answer is no recovery: not logged.
        health.succeeded();
        assert!(health.is_shared());
        health.failed(Failure::TimedOut);
        health.failed(Failure::Redis(redis::ErrorKind::Io));
        health.failed(Failure::TimedOut);
        assert!(!health.is_shared());
        health.succeeded();
        health.succeeded();
        health.failed(Failure::TimedOut);
    });
    let warns: Vec<_> = lines.iter().filter(|l| l.contains("WARN")).collect();
    let infos: Vec<_> = lines.iter().filter(|l| l.contains("INFO")).collect();
    assert_eq!(
        (warns.len(), infos.len(), lines.len()),
        (2, 1, 3),
        "{lines:#?}"
    );
    assert!(warns[0].contains("Redis did not answer"), "{}", warns[0]);
    assert!(warns[0].contains("name=\"claude/primary\""), "{}", warns[0]);
    assert!(warns[0].contains("failure=TimedOut"), "{}", warns[0]);
    assert!(infos[0].contains("shared state resumed"), "{}", infos[0]);
}

#[cfg(feature = "metrics")]
#[test]
fn the_gauge_follows_the_mode() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let gauge = || {
        let snapshot = snapshotter.snapshot().into_hashmap();
        let (key, (_, _, value)) = snapshot.into_iter().next().unwrap();
        let labels: Vec<_> = key
            .key()
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        assert_eq!(key.key().name(), "llm_retry_shared_state_degraded");
        assert_eq!(labels, ["store=budget", "name=claude/primary"]);
        match value {
            DebugValue::Gauge(v) => v.into_inner(),
            other => panic!("{other:?}"),
        }
    };
    metrics::with_local_recorder(&recorder, || {
        let health = health();
        assert_eq!(gauge(), 1.0, "degraded until Redis answers");
        health.succeeded();
        assert_eq!(gauge(), 0.0);
        health.failed(Failure::TimedOut);
        assert_eq!(gauge(), 1.0);
        health.succeeded();
        assert_eq!(gauge(), 0.0);
    });
}
