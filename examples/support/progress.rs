//! A progress line for a long run: redrawn in place on a terminal, and on a
//! pipe or file a plain line every few seconds, so a log reads as lines
//! instead of one line of carriage returns.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often a plain line is written when the output is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// Where progress goes: standard error.
pub(crate) struct Progress {
    terminal: bool,
    last_plain: Option<Instant>,
}

impl Progress {
    pub(crate) fn new() -> Progress {
        Progress {
            terminal: std::io::stderr().is_terminal(),
            last_plain: None,
        }
    }

    /// Shows `line` as the current state.
    pub(crate) fn update(&mut self, line: &str) {
        if self.terminal {
            eprint!("\r{line}");
            let _ = std::io::stderr().flush();
            return;
        }
        let due = self
            .last_plain
            .is_none_or(|last| last.elapsed() >= PLAIN_EVERY);
        if due {
            eprintln!("{line}");
            self.last_plain = Some(Instant::now());
        }
    }

    /// Shows `line` as the final state, on a line of its own.
    pub(crate) fn finish(&mut self, line: &str) {
        if self.terminal {
            eprintln!("\r{line}{}", " ".repeat(12));
        } else {
            eprintln!("{line}");
        }
    }
}
