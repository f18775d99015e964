//! [`ConfigError`]: the one error every constructor and builder returns.

use std::fmt;

/// A configuration refused when it was built, naming what was being built
/// and the setting at fault: `invalid rate-limit gate: requests_per_minute:
/// must be positive, got 0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    of: &'static str,
    setting: String,
    problem: String,
}

impl ConfigError {
    pub(crate) fn new(
        of: &'static str,
        setting: impl Into<String>,
        problem: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            of,
            setting: setting.into(),
            problem: problem.into(),
        }
    }

    /// What was being built: `retry policy`, `rate-limit gate`, `retry budget`.
    pub fn of(&self) -> &str {
        self.of
    }

    /// The setting at fault (a builder method's name, or an environment variable).
    pub fn setting(&self) -> &str {
        &self.setting
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}: {}", self.of, self.setting, self.problem)
    }
}

impl std::error::Error for ConfigError {}
