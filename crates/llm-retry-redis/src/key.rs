//! Names of shared state and the Redis keys they live under.

use std::fmt;

/// Longest accepted name, and namespace.
const MAX_NAME: usize = 64;

/// The namespace of keys unless one is chosen.
pub const DEFAULT_NAMESPACE: &str = "llm-retry";

/// The name of one piece of shared state (a budget, say), the same on every
/// replica that shares it, in a namespace of keys ([`DEFAULT_NAMESPACE`]
/// unless [`in_namespace`](StateName::in_namespace) chose another). Both
/// become part of a Redis key, so both are checked: a name has 1 to 64
/// characters among `A-Z a-z 0-9 _ - . : /`, a namespace 1 to 64 among
/// `A-Z a-z 0-9 _ - .` (no `:`, so that no two pairs make one key). Never
/// put a credential in either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateName {
    namespace: String,
    name: String,
}

impl StateName {
    /// Checks `name`, in the default namespace.
    pub fn new(name: &str) -> Result<StateName, InvalidName> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || "_-.:/".contains(c);
        if !fits(name, allowed) {
            return Err(InvalidName(Part::Name));
        }
        Ok(StateName {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The same name in `namespace` (checked): replicas, or fleets, that
    /// share one Redis keep their keys apart by it.
    pub fn in_namespace(self, namespace: &str) -> Result<StateName, InvalidName> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || "_-.".contains(c);
        if !fits(namespace, allowed) {
            return Err(InvalidName(Part::Namespace));
        }
        Ok(StateName {
            namespace: namespace.to_owned(),
            ..self
        })
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The namespace of its keys.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `{<namespace>:<name>}:<what>`: the braces are a cluster hash tag, so
    /// every key of one name sits in one slot.
    pub(crate) fn key(&self, what: &str) -> String {
        format!("{{{}:{}}}:{what}", self.namespace, self.name)
    }
}

/// Whether `text` has 1 to [`MAX_NAME`] characters, each `allowed`.
fn fits(text: &str, allowed: impl Fn(char) -> bool) -> bool {
    !text.is_empty() && text.len() <= MAX_NAME && text.chars().all(allowed)
}

/// Which part of a [`StateName`] was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Name,
    Namespace,
}

/// A [`StateName`] refused: a name, or namespace, empty, too long or with
/// a character outside those allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidName(Part);

impl fmt::Display for InvalidName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Part::Name => write!(
                f,
                "invalid shared state name: use 1 to {MAX_NAME} characters among A-Z a-z 0-9 _ - . : /"
            ),
            Part::Namespace => write!(
                f,
                "invalid shared state namespace: use 1 to {MAX_NAME} characters among A-Z a-z 0-9 _ - ."
            ),
        }
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

    #[test]
    fn a_namespace_is_checked_and_stays_inside_the_hash_tag() {
        let name = StateName::new("claude/primary").expect("valid");
        let spaced = name.clone().in_namespace("team-a.prod").expect("valid");
        assert_eq!(spaced.key("budget"), "{team-a.prod:claude/primary}:budget");
        assert_eq!(spaced.as_str(), "claude/primary");
        assert_eq!(spaced.namespace(), "team-a.prod");
        assert_eq!(name.namespace(), DEFAULT_NAMESPACE);
        for bad in ["", "a:b", "a/b", "{a}", "a b", &"n".repeat(MAX_NAME + 1)] {
            let error = name.clone().in_namespace(bad).expect_err(bad);
            assert!(error.to_string().contains("namespace"), "{error}");
        }
        assert!(name.in_namespace(&"n".repeat(MAX_NAME)).is_ok());
    }
}
