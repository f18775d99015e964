//! The sync task of [`RedisTargetMarks`](super::RedisTargetMarks): new
//! marks out, every live mark back, in one script call.

use super::store::{keep_later, know_later, lock, Inner, Known};
use crate::task::{bounded, whole_millis_up};
use llm_retry::failover::{Mark, MarkKind};
use std::time::Duration;
use tokio::time::Instant;

impl crate::task::Synced for Inner {
    fn options(&self) -> &crate::options::SharedOptions {
        &self.options
    }

    async fn sync_once(&self) {
        self.sync().await;
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

impl Inner {
    pub(super) async fn sync(&self) -> bool {
        let mut connection = self.connection.lock().await;
        let sending = std::mem::take(&mut *lock(&self.pending));
        let now = Instant::now();
        let mut call = self.script.key(&self.key);
        let live: Vec<_> = sending
            .iter()
            .filter_map(|(key, mark)| {
                let left = mark.until.checked_duration_since(now)?;
                Some((key, mark, whole_millis_up(left)))
            })
            .collect();
        call.arg(live.len());
        for ((target, kind), mark, left_ms) in &live {
            call.arg(field(target, *kind))
                .arg(*left_ms)
                .arg(u8::from(mark.rate_limited));
        }
        let answer = bounded(
            self.options.timeout,
            call.invoke_async::<Vec<(String, u64, u8)>>(&mut *connection),
        )
        .await;
        match answer {
            Ok(marks) => {
                let at = Instant::now();
                let mut known = Known::new();
                for (field, left_ms, limited) in marks {
                    let (Some((target, kind)), Some(until)) = (
                        parse_field(&field),
                        at.checked_add(Duration::from_millis(left_ms)),
                    ) else {
                        continue;
                    };
                    let rate_limited = limited == 1;
                    know_later(
                        &mut known,
                        target,
                        kind,
                        Mark {
                            until,
                            rate_limited,
                        },
                    );
                }
                // Published during the call: not in the answer yet.
                for ((target, kind), mark) in lock(&self.pending).iter() {
                    know_later(&mut known, target, *kind, *mark);
                }
                *lock(&self.known) = known;
                self.health.succeeded();
                true
            }
            Err(failure) => {
                let mut pending = lock(&self.pending);
                for (key, mark) in sending {
                    keep_later(&mut pending, key, mark);
                }
                drop(pending);
                self.health.failed(failure);
                false
            }
        }
    }
}
