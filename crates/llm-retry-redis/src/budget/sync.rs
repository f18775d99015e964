//! The sync task: one script call reports this replica's first attempts
//! and spent retries, reads the fleet's counts and renews its reserve.

use super::store::Inner;
use crate::health::Failure;
use llm_retry::budget::BudgetStore as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How a sync ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Report {
    Shared,
    Failed,
}

impl crate::task::Synced for Inner {
    fn options(&self) -> &crate::options::SharedOptions {
        &self.options
    }

    async fn sync_once(&self) {
        self.sync().await;
    }
}

impl Inner {
    pub(super) async fn sync(&self) -> Report {
        let mut connection = self.connection.lock().await;
        // `held` first: a retry spent between the two reads is then counted
        // twice until the next sync (reserved and spent), never missed.
        let held = self.tokens.load(Ordering::Acquire);
        let deposited = self.pending_deposits.swap(0, Ordering::AcqRel);
        // Only what the local window still holds: retries spent alone in
        // an outage longer than the window are past it, and reported all
        // at once they would refuse the fleet's retries for a window.
        let in_window = self.local.counts(tokio::time::Instant::now()).withdrawn;
        let used = self
            .unreported_used
            .swap(0, Ordering::AcqRel)
            .min(in_window);
        let window = self.rule.window();
        // Ten slots of whole microseconds: the window is whole milliseconds.
        let slot_us = window.as_micros() / 10;
        let ttl = window.saturating_add(self.options.reservation_ttl);
        let mut call = self.script.key(&self.key);
        call.arg(slot_us.to_string())
            .arg(self.rule.ratio_ppm())
            .arg(self.rule.allowance_ppm(0).to_string())
            .arg(&self.replica)
            .arg(deposited)
            .arg(used)
            .arg(held)
            .arg(self.options.reserve)
            .arg(millis(self.options.reservation_ttl))
            .arg(millis(ttl));
        let sent = tokio::time::Instant::now();
        let answer = tokio::time::timeout(
            self.options.timeout,
            call.invoke_async::<(u64, u64, u64, u64)>(&mut *connection),
        )
        .await;
        match answer {
            Ok(Ok((fleet_deposited, fleet_withdrawn, granted, _reserved))) => {
                self.fleet_deposited
                    .store(fleet_deposited, Ordering::Release);
                self.fleet_withdrawn
                    .store(fleet_withdrawn, Ordering::Release);
                // The deadline first: a spender that sees the new tokens
                // sees it too. Spent since `held` was read: still inside
                // the reservation Redis now holds (`held + granted`),
                // reported next time.
                let lapses = sent + self.options.reservation_ttl;
                self.reserved_until
                    .store(self.since_origin(lapses), Ordering::Release);
                self.tokens.fetch_add(granted, Ordering::AcqRel);
                self.health.succeeded();
                Report::Shared
            }
            // The script may have run: the deposits are dropped rather than
            // counted twice (fewer retries, never more); the spent retries
            // are reported again (the same direction).
            Ok(Err(error)) => {
                self.failed(Failure::Redis(error.kind()), used);
                Report::Failed
            }
            Err(_elapsed) => {
                self.failed(Failure::TimedOut, used);
                Report::Failed
            }
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
