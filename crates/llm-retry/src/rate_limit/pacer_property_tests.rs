//! The pacer against a model of its queue, over any mix of arrivals,
//! sends, sends given up and re-bases: tickets are unique while waiting,
//! waiting tickets go in ticket order, and what is sent stays inside the
//! pace (a full burst plus one send an interval).

use super::pacer::{Pace, Pacer};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Clone)]
enum Step {
    /// A send arrives after `gap` milliseconds and takes a ticket; the
    /// tickets due before it were sent on time.
    Arrive { gap: u64 },
    /// Time runs on to the first waiting ticket's time, and it is sent.
    SendFirst,
    /// The `nth` waiting ticket (modulo their number) is given up.
    GiveUp { nth: usize },
    /// The first waiting ticket was refused just after being taken.
    TakeBack,
    /// A hold or a change of rate: the pacer re-bases at `now + floor`.
    Rebase { floor: u64, spent: bool },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u64..3_000).prop_map(|gap| Step::Arrive { gap }),
        3 => Just(Step::SendFirst),
        2 => (0usize..64).prop_map(|nth| Step::GiveUp { nth }),
        1 => Just(Step::TakeBack),
        1 => (0u64..5_000, any::<bool>()).prop_map(|(floor, spent)| Step::Rebase { floor, spent }),
    ]
}

proptest! {
    #[test]
    fn the_queue_stays_in_order_and_inside_the_pace(
        interval_ms in 1u64..2_000,
        burst in 1u32..8,
        steps in proptest::collection::vec(step(), 1..120),
    ) {
        let pace = Pace { interval: Duration::from_millis(interval_ms), burst };
        let start = Instant::now();
        let mut now = start;
        let mut pacer = Pacer::new(start, burst);
        // Tickets taken and neither sent nor given up.
        let mut waiting: BTreeSet<u64> = BTreeSet::new();
        // The last ticket taken, while it may still be taken back.
        let mut just_taken: Option<u64> = None;
        let mut sent: Vec<Instant> = Vec::new();
        for step in steps {
            match step {
                Step::Arrive { gap } => {
                    // Sends are woken on time: every ticket due before the
                    // arrival goes first, at its time.
                    let arrival = now + Duration::from_millis(gap);
                    while let Some(&first) = waiting.first() {
                        let at = pacer.time_of(first, pace.interval).max(now);
                        if at > arrival {
                            break;
                        }
                        prop_assert!(sent.last().is_none_or(|last| at >= *last), "first in, first out");
                        now = at;
                        pacer.release(first, at);
                        waiting.remove(&first);
                        sent.push(at);
                    }
                    now = arrival;
                    let ticket = pacer.take(now, now, pace);
                    prop_assert!(waiting.insert(ticket), "ticket {ticket} handed out twice");
                    just_taken = Some(ticket);
                }
                Step::SendFirst => {
                    let Some(&first) = waiting.first() else { continue };
                    let at = pacer.time_of(first, pace.interval).max(now);
                    if let Some(last) = sent.last() {
                        prop_assert!(at >= *last, "first in, first out");
                    }
                    now = at;
                    pacer.release(first, at);
                    waiting.remove(&first);
                    sent.push(at);
                    just_taken = None;
                }
                Step::GiveUp { nth } => {
                    let Some(&ticket) = waiting.iter().nth(nth % waiting.len().max(1)) else {
                        continue;
                    };
                    pacer.abandon(ticket);
                    waiting.remove(&ticket);
                    just_taken = None;
                }
                Step::TakeBack => {
                    if let Some(ticket) = just_taken.take() {
                        pacer.untake();
                        waiting.remove(&ticket);
                    }
                }
                Step::Rebase { floor, spent } => {
                    pacer.rebase(pace.interval, now + Duration::from_millis(floor), spent);
                    just_taken = None;
                }
            }
            // Waiting tickets go in ticket order, none before the next one
            // a fresh send would get.
            let times: Vec<Instant> =
                waiting.iter().map(|&t| pacer.time_of(t, pace.interval)).collect();
            prop_assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        }
        // Over any span of sends: at most a full burst, plus one send for
        // each interval the span lasts.
        for i in 0..sent.len() {
            for j in i..sent.len() {
                let span = (sent[j] - sent[i]).as_nanos() / pace.interval.as_nanos();
                let count = (j - i + 1) as u128;
                prop_assert!(
                    count <= u128::from(burst) + span,
                    "{count} sends in {:?} at {interval_ms} ms, burst {burst}",
                    sent[j] - sent[i]
                );
            }
        }
    }
}
