//! How [`RedisTargetMarks`](super::RedisTargetMarks) keeps its marks in
//! Redis: each a field of the failover's hash, `<kind>:<target>`, with
//! its end and whether a rate limit set it.

use crate::ends::Entry;
use llm_retry::failover::{Mark, MarkKind};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// A failover's marks, as [`SyncedEnds`](crate::ends::SyncedEnds) keeps them.
pub(super) struct Marks;

/// Marks known, by target (a cooldown for one model under the target's
/// name with the model's tag), looked up by `&str`: `[cooldown, unhealthy]`.
pub(super) type Known = HashMap<String, [Option<Mark>; 2]>;

impl Entry for Marks {
    type Key = (String, MarkKind);
    type Value = Mark;
    type Known = Known;
    type Row = (String, u64, u8);
    /// Two a target, and a cooldown for each model a target keeps one for
    /// (at most 64): room for a few dozen busy targets.
    const MAX_PENDING: usize = 4096;

    fn until(mark: &Mark) -> Instant {
        mark.until
    }

    fn push(call: &mut redis::ScriptInvocation<'_>, key: &Self::Key, mark: &Mark, left_ms: u64) {
        let (target, kind) = key;
        call.arg(field(target, *kind))
            .arg(left_ms)
            .arg(u8::from(mark.rate_limited));
    }

    fn read((field, left_ms, limited): Self::Row, at: Instant) -> Option<(Self::Key, Mark)> {
        let (target, kind) = parse_field(&field)?;
        let until = at.checked_add(Duration::from_millis(left_ms))?;
        let mark = Mark {
            until,
            rate_limited: limited == 1,
        };
        Some(((target.to_owned(), kind), mark))
    }

    fn know(known: &mut Known, (target, kind): &Self::Key, mark: Mark) {
        let slot = match known.get_mut(target.as_str()) {
            Some(marks) => &mut marks[index(*kind)],
            None => &mut known.entry(target.clone()).or_default()[index(*kind)],
        };
        if slot.is_none_or(|known| mark.until > known.until) {
            *slot = Some(mark);
        }
    }
}

/// Where a mark of `kind` sits among a target's known marks.
pub(super) fn index(kind: MarkKind) -> usize {
    match kind {
        MarkKind::Unhealthy => 1,
        _ => 0,
    }
}

fn field(target: &str, kind: MarkKind) -> String {
    match kind {
        MarkKind::Unhealthy => format!("u:{target}"),
        _ => format!("c:{target}"),
    }
}

fn parse_field(field: &str) -> Option<(&str, MarkKind)> {
    let (kind, target) = field.split_at_checked(2)?;
    let kind = match kind {
        "c:" => MarkKind::Cooldown,
        "u:" => MarkKind::Unhealthy,
        _ => return None,
    };
    Some((target, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(at: Instant, secs: u64, rate_limited: bool) -> Mark {
        Mark {
            until: at + Duration::from_secs(secs),
            rate_limited,
        }
    }

    #[test]
    fn the_later_mark_of_a_kind_wins_and_kinds_keep_apart() {
        let now = Instant::now();
        let mut known = Known::new();
        let cooldown = ("primary".to_owned(), MarkKind::Cooldown);
        Marks::know(&mut known, &cooldown, mark(now, 5, true));
        Marks::know(&mut known, &cooldown, mark(now, 2, false));
        Marks::know(
            &mut known,
            &("primary".to_owned(), MarkKind::Unhealthy),
            mark(now, 1, false),
        );
        let [cool, unhealthy] = known["primary"];
        assert_eq!(cool, Some(mark(now, 5, true)));
        assert_eq!(unhealthy, Some(mark(now, 1, false)));
        Marks::know(&mut known, &cooldown, mark(now, 9, false));
        assert_eq!(known["primary"][0], Some(mark(now, 9, false)));
    }

    #[test]
    fn a_row_reads_back_as_the_mark_it_was_written_as() {
        let at = Instant::now();
        for (kind, rate_limited) in [(MarkKind::Cooldown, true), (MarkKind::Unhealthy, false)] {
            let row = (field("a:b", kind), 1_500, u8::from(rate_limited));
            let ((target, read_kind), mark) = Marks::read(row, at).expect("a row it wrote");
            assert_eq!((target.as_str(), read_kind), ("a:b", kind));
            assert_eq!(mark.until, at + Duration::from_millis(1_500));
            assert_eq!(mark.rate_limited, rate_limited);
        }
        assert!(Marks::read(("x:target".to_owned(), 10, 0), at).is_none());
    }
}
