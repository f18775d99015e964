//! One key's state: when the sweep may drop it.
#![allow(clippy::unwrap_used)]

use super::*;

const BOUNDS: AdaptiveRate = AdaptiveRate {
    min_per_sec: 1.0,
    max_per_sec: f64::INFINITY,
};

#[tokio::test(start_paused = true)]
async fn a_key_is_idle_only_once_nothing_of_it_reaches_past_now() {
    let now = Instant::now();
    let later = now + Duration::from_secs(1);
    let plain = Gate::new(None, None, None, None);
    let learning = Gate::new(None, None, Some(BOUNDS), None);
    let fresh = || KeyState::new(&plain, now);
    assert!(fresh().idle(now), "a key nothing has used");
    assert!(
        KeyState::new(&learning, now).idle(now),
        "a learned key with no send queued"
    );

    let mut held = fresh();
    held.hold.refused(0, now, Duration::from_secs(1), later);
    assert!(!held.idle(now));
    assert!(held.idle(later), "the hold is over");

    let quota = Gate::new(Pace::per_minute(60, 1), None, None, None);
    let mut paced = KeyState::new(&quota, now);
    let pace = paced.quotas.pace.unwrap();
    let ticket = paced.quotas.pacer.take(now, now, pace);
    paced.quotas.pacer.release(ticket, now);
    assert!(!paced.idle(now));
    assert!(paced.idle(later));

    let mut probing = fresh();
    probing.restate_window(Some((None, 0)), now);
    let probe = probing.ledger.place(now);
    probing.ledger.enter(probe, None);
    assert!(!probing.idle(now), "a send waits for news of its window");

    let mut window = fresh();
    window.restate_window(Some((Some(later), 5)), now);
    assert!(!window.idle(now), "the provider's window stands");
    assert!(window.idle(later), "and then it reset");
    window.restate_window(Some((None, 5)), now);
    assert!(
        window.idle(now),
        "a window with no known reset says nothing worth keeping"
    );

    let flying = fresh();
    let flight = Arc::clone(&flying.flight);
    let send = super::super::concurrency::InFlight::start(flight, None);
    assert!(!flying.idle(now), "a send in flight");
    drop(send);
    assert!(flying.idle(now));

    let mut queued = KeyState::new(&learning, now);
    let learned = &mut queued.learned.as_mut().unwrap().rate;
    learned.on_stated(1.0, now);
    let pace = learning.request_pace(Some(learned)).unwrap();
    queued.quotas.pace = Some(pace);
    queued.quotas.pacer.take(now, now, pace);
    queued.quotas.pacer.take(now, now, pace);
    assert!(!queued.idle(now), "a second send is booked a second on");
    assert!(
        !queued.idle(later),
        "a third would go a second after the second: dropping the key would send it now"
    );
    assert!(queued.idle(later + Duration::from_secs(1)));
}

#[tokio::test(start_paused = true)]
async fn a_configured_quota_paces_a_key_whose_learned_rate_is_faster() {
    // A quota of one a second, in bursts of `burst`, and a learned rate
    // that starts at `learned` a second.
    let gate = |burst, learned| {
        let rate = AdaptiveRate {
            min_per_sec: 1.0,
            max_per_sec: learned,
        };
        Gate::new(Pace::per_minute(60, burst), None, Some(rate), None)
    };
    // The learned rate faster: the quota, the slower, paces.
    assert_eq!(
        slots_at_once(&gate(1, 1000.0), 3),
        [0, 1, 2].map(Duration::from_secs),
        "a second apart, not a millisecond"
    );
    // A learned rate as fast as the quota: the quota, with its burst.
    assert_eq!(
        slots_at_once(&gate(3, 1.0), 4),
        [0, 0, 0, 1].map(Duration::from_secs)
    );
}

/// The slots of `n` sends to one key booked at once, from now.
fn slots_at_once(gate: &Gate, n: usize) -> Vec<Duration> {
    let now = Instant::now();
    (0..n)
        .map(|_| gate.reserve(7, 0, now, Bounds::default()).unwrap().slot - now)
        .collect()
}

/// A send to `key` booked at `now`, and its answer stating the key's
/// window empty until `reset_in` (`None`: unknown), read by a request
/// that honours waits up to `limit`.
fn emptied(gate: &Gate, key: u64, reset_in: Option<Duration>, limit: Duration, now: Instant) {
    let sent = gate.reserve(key, 0, now, Bounds::default()).unwrap();
    let window = crate::hint::RequestWindow {
        remaining: 0,
        reset_in,
        per_minute: None,
    };
    gate.stated(key, sent.mark, now, (Some(window), None, limit));
}

#[test]
fn the_fleet_paces_a_key_at_a_little_under_its_stated_rate_with_its_room_as_burst() {
    let stated = |per_sec: f64, burst: u32| SharedPace {
        interval: Duration::from_secs_f64(1.0 / (per_sec * STATED_SHARE)),
        burst,
    };
    let plain = Gate::new(None, None, None, None);
    assert_eq!(plain.fleet_pace(None, 5), None, "nothing stated or told");
    assert_eq!(plain.fleet_pace(Some(100.0), 5), Some(stated(100.0, 5)));
    assert_eq!(
        plain.fleet_pace(Some(100.0), 0),
        Some(stated(100.0, 1)),
        "one send at least"
    );
    for nonsense in [0.0, -3.0, f64::NAN, f64::INFINITY] {
        assert_eq!(plain.fleet_pace(Some(nonsense), 5), None, "{nonsense}");
    }
    // A quota the gate was told: it paces, unless the stated one is slower.
    let told = Gate::new(Pace::per_minute(60, 2), None, None, None);
    let quota = SharedPace {
        interval: Duration::from_secs(1),
        burst: 2,
    };
    assert_eq!(told.fleet_pace(None, 5), Some(quota));
    assert_eq!(told.fleet_pace(Some(100.0), 5), Some(quota));
    assert_eq!(told.fleet_pace(Some(0.5), 7), Some(stated(0.5, 7)));
}

#[test]
fn the_fleet_spends_a_token_quota_at_a_little_under_its_stated_rate_with_what_is_left_as_burst() {
    let ms = Duration::from_millis;
    let plain = Gate::new(None, None, None, None);
    assert_eq!(
        plain.fleet_tokens(None, 500),
        None,
        "nothing stated or told"
    );
    assert_eq!(
        plain.fleet_tokens(Some((ms(1), 2_000)), 0),
        None,
        "costs nothing"
    );
    let stated = SharedPace {
        interval: ms(1).div_f64(STATED_SHARE),
        burst: 2_000,
    };
    assert_eq!(
        plain.fleet_tokens(Some((ms(1), 2_000)), 500),
        Some((stated, 500))
    );
    assert_eq!(
        plain.fleet_tokens(Some((ms(1), 0)), 500),
        Some((SharedPace { burst: 1, ..stated }, 500)),
        "one token at least"
    );
    // A quota the gate was told (60 000 a minute, 100 at once): it paces,
    // unless the stated one is slower.
    let told = Gate::new(None, Pace::per_minute(60_000, 100), None, None);
    let quota = SharedPace {
        interval: ms(1),
        burst: 100,
    };
    assert_eq!(told.fleet_tokens(None, 7), Some((quota, 7)));
    let faster = Duration::from_micros(500);
    assert_eq!(
        told.fleet_tokens(Some((faster, 2_000)), 7),
        Some((quota, 7))
    );
    // As slow as the told one at its share (950 µs / 0.95 = 1 ms): the
    // told quota, with its burst.
    let as_slow = Duration::from_micros(950);
    assert_eq!(as_slow.div_f64(STATED_SHARE), ms(1));
    assert_eq!(
        told.fleet_tokens(Some((as_slow, 2_000)), 7),
        Some((quota, 7))
    );
    let slower = SharedPace {
        interval: ms(2).div_f64(STATED_SHARE),
        burst: 9,
    };
    assert_eq!(told.fleet_tokens(Some((ms(2), 9)), 7), Some((slower, 7)));
}

#[tokio::test(start_paused = true)]
async fn a_send_whose_turn_is_its_deadline_waits_for_it() {
    let gate = Gate::new(Pace::per_minute(60, 1), None, None, None);
    let now = Instant::now();
    let turn = now + Duration::from_secs(1);
    gate.reserve(7, 0, now, Bounds::default()).unwrap();
    let bounds = Bounds {
        deadline: Some(turn),
        ..Bounds::default()
    };
    let mut second = gate.reserve(7, 0, now, bounds).unwrap();
    assert_eq!(second.slot, turn);
    assert_eq!(gate.check(7, &mut second, now), Ok(Some(turn)));
    assert_eq!(gate.check(7, &mut second, turn), Ok(None));
}

#[tokio::test(start_paused = true)]
async fn a_window_stated_empty_holds_the_key_until_its_reset() {
    let gate = Gate::new(None, None, None, None);
    let now = Instant::now();
    let s = Duration::from_secs;
    emptied(&gate, 7, Some(s(2)), s(60), now);
    let next = gate.reserve(7, 0, now, Bounds::default()).unwrap();
    assert_eq!(next.slot, now + s(2));
    // Capped at the longest wait the request that read it honours.
    emptied(&gate, 8, Some(s(2)), s(1), now);
    let capped = gate.reserve(8, 0, now, Bounds::default()).unwrap();
    assert_eq!(capped.slot, now + Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_probe_whose_turn_is_past_its_deadline_waits_for_news_until_then() {
    let gate = Gate::new(None, None, None, None);
    let now = Instant::now();
    // Nothing left, and no reset stated: sends probe one at a time.
    emptied(&gate, 7, None, Duration::from_secs(60), now);
    let probe = gate.reserve(7, 0, now, Bounds::default()).unwrap();
    assert_eq!(probe.slot, now, "the first probe goes at once");
    let deadline = now + Duration::from_millis(100);
    let bounds = Bounds {
        deadline: Some(deadline),
        ..Bounds::default()
    };
    let mut next = gate.reserve(7, 0, now, bounds).unwrap();
    // Its turn is past its deadline, but news of the window may come
    // first: it waits until the deadline, and is refused only then.
    assert_eq!(gate.check(7, &mut next, now), Ok(Some(deadline)));
    assert!(gate.check(7, &mut next, deadline).is_err());
}

/// Sends queued behind a hold before their key had a rate take their
/// tickets once it has one: they leave paced from the hold's end, not all
/// at once into the bucket whose 429 named the hold.
#[tokio::test(start_paused = true)]
async fn sends_queued_behind_a_hold_before_the_key_was_paced_leave_paced() {
    let gate = Gate::new(None, None, Some(BOUNDS), None);
    let now = Instant::now();
    let ms = Duration::from_millis;
    let free = Bounds::default();
    gate.reserve(7, 0, now, free).unwrap();
    assert!(gate.hold(7, 0, now, ms(10), Duration::from_secs(60), false));
    let mut queued: Vec<Booking> = (0..3)
        .map(|_| gate.reserve(7, 0, now, free).unwrap())
        .collect();
    // Then the key's 429s start a rate: a send every 10 ms.
    for _ in 0..40 {
        gate.throttled(7, now, now, Some(ms(10)), false);
    }
    assert_eq!(gate.learned_rates(), [100.0]);
    let end = now + ms(10);
    let looks: Vec<_> = queued
        .iter_mut()
        .map(|booking| gate.check(7, booking, end).unwrap())
        .collect();
    assert_eq!(looks, [None, Some(end + ms(10)), Some(end + ms(20))]);
}

/// A hold that later answers contradict frees the key's told quotas at
/// once, its token quota as well as its request quota: a send after it
/// waits no longer than its own cost.
#[tokio::test(start_paused = true)]
async fn a_hold_later_answers_contradict_frees_a_told_token_quota_too() {
    let s = Duration::from_secs;
    let free = Bounds::default();
    for (what, gate) in [
        (
            "requests",
            Gate::new(Pace::per_minute(60_000, 1_000), None, None, None),
        ),
        (
            "tokens",
            Gate::new(None, Pace::per_minute(60_000, 1_000), None, None),
        ),
    ] {
        let now = Instant::now();
        let refused = gate.reserve(7, 10, now, free).unwrap();
        let later: Vec<Booking> = (0..4)
            .map(|_| gate.reserve(7, 10, now, free).unwrap())
            .collect();
        assert!(gate.hold(7, refused.mark.order, now, s(1), s(60), false));
        for booking in &later {
            gate.served(7, (now, booking.mark), now, None, None, s(60));
        }
        let next = gate.reserve(7, 10, now, free).unwrap();
        let wait = next.slot - now;
        assert!(wait <= Duration::from_millis(10), "{what}: waits {wait:?}");
    }
}

/// Test-only entry points of the gate (kept out of the non-test code).
impl Gate {
    /// Queues a send of `cost` tokens on `key`, unless it would start
    /// past its bounds. Sends are queued in call order.
    pub(in crate::rate_limit) fn reserve(
        &self,
        key: u64,
        cost: u64,
        now: Instant,
        bounds: Bounds,
    ) -> Result<Booking, GateError> {
        self.reserve_send(key, cost, now, bounds)
            .map(|reserved| reserved.0)
    }

    /// A send succeeded, its answer stating nothing.
    pub(in crate::rate_limit) fn succeeded(&self, key: u64, now: Instant) {
        self.served(
            key,
            (now, TokenMark::default()),
            now,
            None,
            None,
            Duration::ZERO,
        );
    }

    /// Keys held and sweeps made so far.
    pub(in crate::rate_limit) fn key_stats(&self) -> (usize, u64) {
        let keys = lock(&self.keys);
        (keys.len(), keys.sweeps())
    }

    /// The keys' learned rates, in sends a second.
    pub(in crate::rate_limit) fn learned_rates(&self) -> Vec<f64> {
        let keys = lock(&self.keys);
        keys.values()
            .filter_map(|state| Some(state.learned.as_ref()?.rate.per_sec()))
            .collect()
    }
}
