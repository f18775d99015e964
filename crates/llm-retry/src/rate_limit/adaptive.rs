//! Adaptive pacing: learn a key's send rate from its 429s, so a fleet
//! settles below the provider's limit instead of oscillating around it.
//!
//! Multiplicative decrease, then a quick regain and a slow probe: a 429
//! multiplies the rate by 0.8 — at most once per congestion event (a burst
//! of concurrent 429s is one signal, not a hundred); while sends succeed the
//! rate closes the gap to 95 % of the rate that last drew a 429 with a one
//! second time constant, and past it probes upward by a hundredth of the
//! ceiling per second. The regain keeps goodput near the provider's limit;
//! the slow probe keeps 429s rare.
//!
//! Without a ceiling (`max_per_sec` infinite) a key is unpaced until its
//! first 429, and the first rate is measured rather than configured: one
//! send per wait the 429 named to the millisecond (a token bucket's time to
//! its next token; the longest its burst named so far, as the burst's later
//! 429s come nearer the next token), or the successes per second since the
//! key's first send. The rest of that burst's 429s, and those of sends
//! made before a closer look, lower it to a longer wait they name to the
//! millisecond; like a cut, each closer look starts a new quiet span. Until the next
//! congestion event the rate then grows a quarter each second of
//! successes — slow start, as a rate rounded to whole milliseconds is low —
//! or doubles each second when the first rate rests on fewer than five
//! successes (calls still running, whole-second waits). From there it adapts as
//! above, probing by a hundredth of the rate that last drew a 429.
//!
//! A 429 is taken as news about the key's rate unless its headers say only
//! a token quota is exhausted (the policy's `KeyNews::Throttled { rate }`).
//!
//! First, do no harm: 429s are evidence that the key is out of capacity
//! only when they are many, or when pacing makes them fewer. An unpaced key
//! starts to pace only once refusals average at least [`ENGAGE_SHARE`] of
//! its recent answers (about thirty in a row, or most of a burst). Every
//! [`TRIAL`] answers to sends made since, a paced key's refusal share is
//! judged against the share that drew its last cut: one that is not lower
//! by more than chance explains (and at least [`NOISE_SHARE`]), however
//! high, shows that its 429s do not follow its rate — a shared organisation quota drained by others, a
//! tenant limit in front, refusals at random — and the key stands down:
//! unpaced again (or at the rate stated or configured), as without a gate,
//! and for a minute ([`Doubt`]) its refusals start or cut no rate. A share
//! that stays above [`ENGAGE_SHARE`] is judged so only once the cuts have
//! brought the rate to the floor of half the rate last judged (the next cut
//! would reach it): a rate far above the key's takes a few cuts. Between
//! two judgements the cuts take at most half the rate: refusals that come
//! whatever the rate are a congestion event nearly each, and would sink it
//! before the judgement.

use super::doubt::Doubt;
use std::time::Duration;
use tokio::time::Instant;

/// Bounds of an adaptive rate, in sends per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct AdaptiveRate {
    /// The rate never falls below this (sends per second, > 0).
    pub(super) min_per_sec: f64,
    /// The rate never rises above this, and starts here. Infinite: no
    /// ceiling, unpaced until the first 429 (see [`Quotas::learned`](super::Quotas::learned)).
    pub(super) max_per_sec: f64,
}

/// Highest rate a key can learn, in sends per second.
const MAX_LEARNED: f64 = 1e6;
/// Share of the rate kept after a 429.
const DECREASE: f64 = 0.8;
/// Share of the ceiling added per second of successes, past the regain.
const INCREASE_PER_SEC: f64 = 0.01;
/// Share of the last throttled rate the regain aims for.
const REGAIN_TARGET: f64 = 0.95;
/// Successes after which their rate is the first estimate, whatever a 429 says.
const MIN_SUCCESSES: u32 = 5;
/// Growth a second in slow start after a measured first estimate (one
/// resting on little doubles): enough to correct a rate rounded down.
const SLOW_START_MEASURED: f64 = 1.25;
/// Growth a second in slow start after a first estimate resting on one
/// or two successes, or none, or on a window's reset: a floor more than
/// a rate.
const LOW_CONFIDENCE: f64 = 2.0;
/// Shortest span a first estimate divides by, so one instant's burst does
/// not read as an infinite rate.
const MIN_SPAN: Duration = Duration::from_millis(10);
/// How long a wait named to the millisecond stays part of the burst whose
/// refusals start an unmeasured key's rate: they come back within about a
/// reply of each other.
const BURST_SPAN: Duration = Duration::from_secs(1);

/// Longest wait read as a token bucket's time to its next token. Longer
/// waits (a window's reset, every waiting request told the same instant)
/// say when capacity returns, not at what rate.
const LONGEST_TOKEN_WAIT: Duration = Duration::from_millis(250);

/// Sends a second released after a window's reset on a key whose rate is
/// not measured yet: a millisecond apart, so they leave in order, and fast
/// enough for any window.
const RELEASE_AFTER_RESET: f64 = 1000.0;

/// Weight of one answer in the refusal share, an average over about the
/// last thirty-two answers that starts at none refused: a fresh key paces
/// once refusals came about thirty in a row, or most of a burst.
const SHARE_WEIGHT: f64 = 1.0 / 32.0;
/// Refusal share from which an unpaced key starts to pace: most sends are
/// refused, so the key is sent well past what it admits. Refusals that
/// come at random to a third of all answers stay below it.
pub(super) const ENGAGE_SHARE: f64 = 0.6;
/// Refusal share below which a paced key's 429s are the probe's own: the
/// rate is at the key's capacity, not above it (a probe past it draws one
/// or two in a trial).
pub(super) const NOISE_SHARE: f64 = 0.1;
/// Answers to sends made since the rate was last judged that show whether
/// its cuts helped.
const TRIAL: u32 = 30;

/// A wait named to the millisecond and short: a token bucket's time to its
/// next token.
fn precise(named_wait: Option<Duration>) -> Option<Duration> {
    named_wait.filter(|wait| *wait >= Duration::from_millis(1) && *wait < LONGEST_TOKEN_WAIT)
}

/// Standard deviations by which a share must fall to show the cuts helped.
const SPREADS: f64 = 1.5;

/// How far the refusal share of `answers` answers strays by chance from a
/// true share `share` (one standard deviation): a share lower by less is
/// no evidence that the cuts helped.
fn spread(share: f64, answers: u32) -> f64 {
    (share * (1.0 - share) / f64::from(answers.max(1))).sqrt()
}

/// The learned rate of one key.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Learned {
    per_sec: f64,
    /// 429s answered to sends slotted before this belong to the last decrease.
    quiet_until: Option<Instant>,
    /// When the rate last rose (or fell).
    changed: Option<Instant>,
    /// The rate that last drew a 429.
    last_throttled: Option<f64>,
    /// Since the key's first send, while its rate is still unmeasured:
    /// when it started, and the successes seen.
    first: Option<(Instant, u32)>,
    /// While the rate is still unmeasured: the longest wait a 429 named to
    /// the millisecond, and when (the burst's first 429s name the longest:
    /// its later ones come nearer the next token, and are often the ones
    /// that start the rate).
    longest_wait: Option<(Duration, Instant)>,
    /// Whether quiet 429s (of the first burst, or of sends made before a
    /// closer look) may still refine the first estimate.
    refining: bool,
    /// After a first estimate, until the next 429: the factor the rate
    /// grows by each second of successes (2 when the estimate rests on
    /// little and may be far too low).
    slow_start: Option<f64>,
    /// The sustained rate the provider's answers state (its quota per
    /// minute over 60 s): the rate starts there and never rises above it.
    stated: Option<f64>,
    /// The share of refusals among the key's recent answers about its rate.
    share: f64,
    /// A refusal ended its request (`x-should-retry: false`): the rate is
    /// not probed above where a cut left the one that drew it (until the
    /// rate stands down, which forgets it).
    refused_at: Option<f64>,
    /// The refusal share that drew the last cut (or the first rate): the
    /// sends made since must find it lower, or the refusals do not follow
    /// the rate.
    share_at_cut: Option<f64>,
    /// Answers to the sends made since the last change of rate: served,
    /// and refused.
    trial: (u32, u32),
    /// The rate stood down: while in doubt, the key's refusals start or
    /// cut no rate.
    doubt: Doubt,
    /// The rate when the share of refusals was last judged lower (or the
    /// first rate): a share that stays high is judged only once the cuts
    /// halved it.
    rate_at_cut: Option<f64>,
}

/// What a 429 did to a learned rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Throttle {
    /// Nothing: the 429 belongs to a cut already made, or is too little
    /// evidence to start pacing.
    Kept,
    /// The rate was set or cut.
    Changed,
    /// The refusals do not follow the rate: the key is unpaced again.
    StoodDown,
}

impl AdaptiveRate {
    /// Valid bounds, or `None`.
    pub(super) fn checked(self) -> Option<AdaptiveRate> {
        let ok = self.min_per_sec.is_finite()
            && !self.max_per_sec.is_nan()
            && self.min_per_sec > 0.0
            && self.min_per_sec <= self.max_per_sec;
        ok.then_some(self)
    }

    pub(super) fn start(&self) -> Learned {
        Learned {
            per_sec: self.max_per_sec,
            ..Learned::default()
        }
    }
}

impl Learned {
    /// Time between sends at the current rate.
    pub(super) fn interval(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.per_sec.max(1e-6)).min(Duration::from_secs(3600))
    }

    /// The sustained rate the provider's answers stated, if they did.
    pub(super) fn stated(&self) -> Option<f64> {
        self.stated
    }

    /// The current rate in sends per second.
    pub(super) fn per_sec(&self) -> f64 {
        self.per_sec
    }

    /// Whether the key is still unpaced: no ceiling, no stated quota and
    /// no 429 yet.
    pub(super) fn unmeasured(&self) -> bool {
        self.per_sec.is_infinite()
    }

    /// The provider stated the key's sustained rate at `now`: an unpaced
    /// key starts there (the 429s of sends that went before belong to no
    /// decrease), and no key rises above it. A stated rate below the
    /// bounds' floor is taken as stated: the floor bounds what 429s teach.
    pub(super) fn on_stated(&mut self, per_sec: f64, now: Instant) {
        if !(per_sec.is_finite() && per_sec > 0.0) {
            return;
        }
        self.stated = Some(per_sec);
        if self.unmeasured() {
            self.first = None;
            self.slow_start = None;
            self.refining = false;
            self.quiet_until = Some(now);
        }
        // An unpaced key's rate is infinite: above any stated.
        if self.per_sec > per_sec {
            self.per_sec = per_sec;
            self.changed = Some(now);
        }
    }

    /// Its sends began at `since`, before it had a state, and `served` of
    /// them were served: an unmeasured key's measurement starts there.
    pub(super) fn began(&mut self, since: Instant, served: u32) {
        if self.unmeasured() {
            self.first = Some((since, served));
        }
    }

    /// A send booked at `now`: an unmeasured key's measurement starts.
    pub(super) fn on_send(&mut self, now: Instant) {
        if self.unmeasured() && self.first.is_none() {
            self.first = Some((now, 0));
        }
    }

    /// The first rate of an unmeasured key throttled at `now`: one send per
    /// wait the 429 named to the millisecond, or the longest its burst named
    /// before it (the time to a token bucket's next token; the rest of the
    /// burst's 429s, and those of sends made before a closer look, then
    /// refine it), else the
    /// successes per second since its first send once five have come back,
    /// else the one or few successes over at least 10 ms — a guess, which
    /// slow start lifts quickly if it is low.
    fn first_estimate(&self, now: Instant, named_wait: Option<Duration>) -> (f64, f64) {
        let Some((since, successes)) = self.first else {
            return (0.0, LOW_CONFIDENCE);
        };
        let span = now.saturating_duration_since(since).max(MIN_SPAN);
        match precise(named_wait) {
            Some(wait) => {
                let burst = self
                    .longest_wait
                    .filter(|(_, at)| now.saturating_duration_since(*at) <= BURST_SPAN);
                let wait = burst.map_or(wait, |(longest, _)| longest.max(wait));
                (1.0 / wait.as_secs_f64(), SLOW_START_MEASURED)
            }
            None if successes >= MIN_SUCCESSES => (
                f64::from(successes) / span.as_secs_f64(),
                SLOW_START_MEASURED,
            ),
            None => (
                f64::from(successes.max(1)) / span.as_secs_f64(),
                LOW_CONFIDENCE,
            ),
        }
    }

    /// An unmeasured key's 429 named `named_wait` at `now`: kept if it is a
    /// token bucket's and the longest of the burst.
    fn note_wait(&mut self, now: Instant, named_wait: Option<Duration>) {
        let Some(wait) = precise(named_wait) else {
            return;
        };
        let longer = self.longest_wait.is_none_or(|(longest, at)| {
            wait >= longest || now.saturating_duration_since(at) > BURST_SPAN
        });
        if longer {
            self.longest_wait = Some((wait, now));
        }
    }

    /// One more answer about the rate in the refusal share.
    fn count_answer(&mut self, refused: bool) {
        let x = if refused { 1.0 } else { 0.0 };
        self.share += (x - self.share) * SHARE_WEIGHT;
    }

    /// A success at `now` for a send that went at `sent`: climb in
    /// proportion to the time since the last change.
    pub(super) fn on_success(&mut self, bounds: &AdaptiveRate, sent: Instant, now: Instant) {
        self.count_answer(false);
        if self.quiet_until.is_none_or(|quiet| sent > quiet) {
            self.trial.0 = self.trial.0.saturating_add(1);
        }
        if self.unmeasured() {
            if let Some((_, successes)) = &mut self.first {
                *successes = successes.saturating_add(1);
            }
            return;
        }
        let since = self
            .changed
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        let dt = since.min(Duration::from_secs(1)).as_secs_f64();
        // Without a ceiling, probe by a hundredth of the highest rate seen.
        let scale = if bounds.max_per_sec.is_finite() {
            bounds.max_per_sec
        } else {
            self.last_throttled
                .unwrap_or(self.per_sec)
                .max(self.per_sec)
        };
        let probe = scale * INCREASE_PER_SEC * dt;
        let regain = self.last_throttled.map_or(0.0, |rate| {
            (rate * REGAIN_TARGET - self.per_sec).max(0.0) * dt
        });
        let doubling = self
            .slow_start
            .map_or(0.0, |factor| self.per_sec * (factor.powf(dt) - 1.0));
        // Finite however long the successes last: an infinite rate means
        // "not measured yet" and must not come back.
        self.per_sec = (self.per_sec + probe.max(regain).max(doubling))
            .min(bounds.max_per_sec)
            .min(self.stated.unwrap_or(MAX_LEARNED))
            .min(self.refused_at.unwrap_or(MAX_LEARNED))
            .min(MAX_LEARNED);
        self.changed = Some(now);
    }

    /// A 429 for a send that went at `sent`, naming `named_wait` or not:
    /// decrease once per congestion event, ignoring the 429s of sends that
    /// went before the decrease, as long as the decreases lower the share
    /// of refusals; an unpaced key starts only when that share is high.
    pub(super) fn on_throttle(
        &mut self,
        bounds: &AdaptiveRate,
        sent: Instant,
        now: Instant,
        named_wait: Option<Duration>,
    ) -> Throttle {
        self.count_answer(true);
        if self.doubt.holds(now) {
            // Its last rate did not lower its refusals: these start or cut
            // none, stated rate or not.
            return Throttle::Kept;
        }
        if self.quiet_until.is_some_and(|quiet| sent <= quiet) {
            // A 429 of a send made before the first estimate or its latest
            // closer look: a longer wait named to the millisecond is a
            // closer look at the rate.
            if let (true, Some(wait)) = (self.refining, precise(named_wait)) {
                let rate = (1.0 / wait.as_secs_f64()).max(bounds.min_per_sec);
                if rate < self.per_sec {
                    self.per_sec = rate;
                    self.last_throttled = Some(rate);
                    self.rate_at_cut = Some(rate);
                    // Sends made until now went at the rate read too high:
                    // their 429s belong to it, not to the closer look, and
                    // its trial starts now. (Never earlier: `now` is read
                    // before the gate's lock, so it may trail a 429 of
                    // another thread's.)
                    self.quiet_until = self.quiet_until.max(Some(now));
                    self.changed = self.changed.max(Some(now));
                    self.trial = (0, 0);
                    return Throttle::Changed;
                }
            }
            return Throttle::Kept;
        }
        if self.unmeasured() {
            self.note_wait(now, named_wait);
            if self.share < ENGAGE_SHARE {
                // Too few refusals to say the key is sent faster than it
                // admits.
                return Throttle::Kept;
            }
            self.share_at_cut = Some(self.share);
            self.trial = (0, 0);
        } else {
            self.trial.1 = self.trial.1.saturating_add(1);
            let (served, refused) = self.trial;
            let answers = served.saturating_add(refused);
            // Judged once enough sends went since the last judgement; until
            // then each congestion event cuts, as it always did.
            if answers >= TRIAL {
                let share = f64::from(refused) / f64::from(answers);
                // However many refusals remain, once the cuts halved the
                // rate: a share that stays as high whatever the rate (an
                // organisation's quota others drain) is no evidence about
                // it. A rate far above the key's takes a few cuts first.
                let helped = share < NOISE_SHARE
                    || self
                        .share_at_cut
                        .is_none_or(|at_cut| share + SPREADS * spread(at_cut, answers) < at_cut);
                // The next cut would reach the floor a judgement sets.
                let halved = self
                    .rate_at_cut
                    .is_none_or(|rate| self.per_sec * DECREASE <= rate / 2.0);
                if !helped && (share < ENGAGE_SHARE || halved) {
                    self.stand_down(bounds, now);
                    return Throttle::StoodDown;
                }
                if helped {
                    self.share_at_cut = Some(share);
                    self.rate_at_cut = Some(self.per_sec);
                }
                self.trial = (0, 0);
            }
        }
        if self.unmeasured() {
            // A window's reset with little measured: the hold covers the
            // wait, and the sends queued behind it leave in order, fast,
            // and faster while they are served. It names no rate: none was
            // throttled, and no closer look refines it.
            let reset = named_wait.is_some_and(|wait| wait >= LONGEST_TOKEN_WAIT)
                && self
                    .first
                    .is_none_or(|(_, successes)| successes < MIN_SUCCESSES);
            let (estimate, slow_start) = if reset {
                (RELEASE_AFTER_RESET, LOW_CONFIDENCE)
            } else {
                self.first_estimate(now, named_wait)
            };
            let estimate = estimate.max(bounds.min_per_sec);
            self.refining = !reset;
            self.first = None;
            self.longest_wait = None;
            self.last_throttled = Some(estimate).filter(|_| !reset);
            self.per_sec = estimate;
            self.rate_at_cut = Some(estimate);
            // A guess from one or two answers may be far too low: climb fast.
            self.slow_start = Some(slow_start);
        } else {
            self.refining = false;
            self.slow_start = None;
            self.last_throttled = Some(self.per_sec);
            // Until a judgement finds the refusals fewer, the cuts take at
            // most half the rate last judged: refusals that come whatever
            // the rate draw a cut from nearly every answer, and must not
            // sink the rate before the judgement sees they did not help.
            let judged = *self.rate_at_cut.get_or_insert(self.per_sec);
            // Never a rise: a stated quota or a refusal's cap may have put
            // the rate under that floor already.
            self.per_sec = (self.per_sec * DECREASE)
                .max(judged / 2.0)
                .min(self.per_sec)
                .max(bounds.min_per_sec);
        }
        self.quiet_until = Some(now);
        self.changed = Some(now);
        Throttle::Changed
    }

    /// A 429 as [`Learned::on_throttle`] takes it; one that ended its
    /// request (`final_answer`: `x-should-retry: false`) and changed the
    /// rate also caps it (see `cap_at_refusal`). The other 429s of its
    /// congestion event, and those of a key in doubt or standing down,
    /// cap nothing more.
    pub(super) fn on_refusal(
        &mut self,
        bounds: &AdaptiveRate,
        sent: Instant,
        now: Instant,
        named_wait: Option<Duration>,
        final_answer: bool,
    ) -> Throttle {
        let did = self.on_throttle(bounds, sent, now, named_wait);
        if final_answer && did == Throttle::Changed {
            self.cap_at_refusal(bounds);
        }
        did
    }

    /// The refusal that just changed the rate ended its request: from now
    /// on the rate stays where a cut leaves the rate that drew it (0.8 of
    /// it, and no lower than a cut may go before the next judgement), and
    /// no slow start lifts it. Not at the regain target: a first rate read
    /// from a named wait overstates a bucket's rate by the spread of the
    /// burst's arrivals (9 ms named for a 10 ms token when the burst came
    /// over a millisecond: 11 %), and sending even at exactly the
    /// bucket's rate loses a request to every token that comes late.
    fn cap_at_refusal(&mut self, bounds: &AdaptiveRate) {
        if self.unmeasured() {
            return;
        }
        let cut_floor = self.rate_at_cut.map_or(0.0, |judged| judged / 2.0);
        let drew = (self.last_throttled.unwrap_or(self.per_sec) * DECREASE).max(cut_floor);
        let cap = self
            .refused_at
            .map_or(drew, |cap| cap.min(drew))
            .max(bounds.min_per_sec);
        self.refused_at = Some(cap);
        self.per_sec = self.per_sec.min(cap).max(bounds.min_per_sec);
        self.slow_start = None;
    }

    /// The refusals did not follow the rate: back to the start (unpaced,
    /// or the configured ceiling), the evidence forgotten; a rate the
    /// provider stated still caps it.
    fn stand_down(&mut self, bounds: &AdaptiveRate, now: Instant) {
        let stated = self.stated;
        *self = bounds.start();
        self.stated = stated;
        self.doubt.proved_wrong(now);
        if let Some(per_sec) = stated {
            self.per_sec = self.per_sec.min(per_sec);
        }
        self.quiet_until = Some(now);
        self.changed = Some(now);
    }
}

#[cfg(test)]
#[path = "adaptive_tests.rs"]
mod tests;
