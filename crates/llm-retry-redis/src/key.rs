//! Names of shared state and the Redis keys they live under.

use std::fmt;

/// Longest accepted name.
const MAX_NAME: usize = 64;

/// The name of one piece of shared state (a budget, say), the same on every
/// replica that shares it. It becomes part of a Redis key, so it is checked:
/// 1 to 64 characters among `A-Z a-z 0-9 _ - . : /`. Never put a credential
/// in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateName(String);

impl StateName {
    /// Checks `name`.
    pub fn new(name: &str) -> Result<StateName, InvalidName> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || "_-.:/".contains(c);
        if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(allowed) {
            return Err(InvalidName(()));
        }
        Ok(StateName(name.to_owned()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `{llm-retry:<name>}:<what>`: the braces are a cluster hash tag, so
    /// every key of one name sits in one slot.
    pub(crate) fn key(&self, what: &str) -> String {
        format!("{{llm-retry:{}}}:{what}", self.0)
    }
}

/// A [`StateName`] refused: empty, too long or with a character outside
/// `A-Z a-z 0-9 _ - . : /`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidName(());

impl fmt::Display for InvalidName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid shared state name: use 1 to {MAX_NAME} characters among A-Z a-z 0-9 _ - . : /"
        )
    }
}

impl std::error::Error for InvalidName {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_keys_hash_tagged() {
        let cases: [(&str, bool); 7] = [
            ("claude/primary", true),
            ("a", true),
            ("team_1.gpt-4o:eu", true),
            ("", false),
            ("has space", false),
            ("brace}", false),
            ("ünï", false),
        ];
        for (name, ok) in cases {
            assert_eq!(StateName::new(name).is_ok(), ok, "{name:?}");
        }
        assert!(StateName::new(&"x".repeat(MAX_NAME)).is_ok());
        assert!(StateName::new(&"x".repeat(MAX_NAME + 1)).is_err());
        let name = StateName::new("claude/primary").expect("valid");
        assert_eq!(name.key("budget"), "{llm-retry:claude/primary}:budget");
    }
}
