//! The adaptive rate's arithmetic, step by step.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::rate_limit::doubt::DOUBT_FOR;

/// A burst of refusals at `at` for sends that went at `sent`: evidence
/// enough to set or cut the rate. What the burst did.
fn refused_burst(
    learned: &mut Learned,
    bounds: &AdaptiveRate,
    sent: Instant,
    at: Instant,
    wait: Option<Duration>,
) -> Throttle {
    let mut did = Throttle::Kept;
    for _ in 0..2 * TRIAL {
        if learned.on_throttle(bounds, sent, at, wait) == Throttle::Changed {
            did = Throttle::Changed;
        }
    }
    did
}

/// The learned rate is `expected`, to rounding.
#[track_caller]
fn assert_rate(learned: &Learned, expected: f64) {
    assert!(
        (learned.per_sec() - expected).abs() < 1e-9,
        "{} against {expected}",
        learned.per_sec()
    );
}

const BOUNDS: AdaptiveRate = AdaptiveRate {
    min_per_sec: 1.0,
    max_per_sec: 100.0,
};

#[test]
fn after_a_decrease_the_rate_regains_quickly_then_probes_slowly() {
    let mut learned = BOUNDS.start();
    let t0 = Instant::now();
    learned.per_sec = 50.0;
    refused_burst(&mut learned, &BOUNDS, t0, t0, None);
    assert!((learned.per_sec() - 50.0 * DECREASE).abs() < 1e-9);
    // Successes every 10 ms for 3 s: most of the gap to the target closes.
    let target = 50.0 * REGAIN_TARGET;
    let mut at = t0;
    for _ in 0..300 {
        at += Duration::from_millis(10);
        learned.on_success(&BOUNDS, at, at);
    }
    let regained = learned.per_sec();
    assert!(regained > target - 1.0 && regained <= target, "{regained}");
    // Past the regain target only the slow probe (1 /s per second) remains.
    for _ in 0..100 {
        at += Duration::from_millis(10);
        learned.on_success(&BOUNDS, at, at);
    }
    assert!(learned.per_sec() - regained < 1.1, "{}", learned.per_sec());
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_429s_is_one_decrease() {
    let mut learned = BOUNDS.start();
    let sent = Instant::now();
    tokio::time::advance(Duration::from_millis(10)).await;
    for _ in 0..50 {
        learned.on_throttle(&BOUNDS, sent, Instant::now(), None);
    }
    assert!((learned.per_sec() - 100.0 * DECREASE).abs() < 1e-9);
    tokio::time::advance(Duration::from_millis(10)).await;
    refused_burst(&mut learned, &BOUNDS, Instant::now(), Instant::now(), None);
    assert!(
        (learned.per_sec() - 100.0 * DECREASE * DECREASE).abs() < 1e-9,
        "a later send's 429 is a new event"
    );
}

#[test]
fn the_rate_stays_inside_its_bounds() {
    let mut learned = BOUNDS.start();
    let now = Instant::now();
    // 1 000 429s, each a congestion event of its own and never judged: a
    // thousand cuts.
    for _ in 0..1000 {
        learned.quiet_until = None;
        learned.trial = (0, 0);
        learned.rate_at_cut = None;
        learned.on_throttle(&BOUNDS, now, now, None);
    }
    assert_eq!(learned.per_sec(), 1.0);
    let mut at = now;
    learned.on_success(&BOUNDS, at, at);
    for _ in 0..200 {
        at += Duration::from_secs(1);
        learned.on_success(&BOUNDS, at, at);
    }
    assert_eq!(learned.per_sec(), 100.0);
    assert_eq!(learned.interval(), Duration::from_millis(10));
    assert!(AdaptiveRate {
        min_per_sec: 0.0,
        max_per_sec: 1.0
    }
    .checked()
    .is_none());
    assert!(AdaptiveRate {
        min_per_sec: 2.0,
        max_per_sec: 1.0
    }
    .checked()
    .is_none());
    assert!(AdaptiveRate {
        min_per_sec: 1.0,
        max_per_sec: f64::NAN
    }
    .checked()
    .is_none());
}

mod unbounded {
    use super::*;

    const UNBOUNDED: AdaptiveRate = AdaptiveRate {
        min_per_sec: 1.0,
        max_per_sec: f64::INFINITY,
    };

    #[test]
    fn without_a_ceiling_the_key_is_unpaced_until_its_first_429() {
        let learned = UNBOUNDED.checked().unwrap().start();
        assert_eq!(learned.interval(), Duration::ZERO);
    }

    #[test]
    fn the_first_rate_is_the_measured_success_rate() {
        let mut learned = UNBOUNDED.start();
        let t0 = Instant::now();
        for _ in 0..200 {
            learned.on_send(t0);
        }
        // 40 successes in the first 200 ms, then a 429: 200 per second.
        for i in 0..40 {
            learned.on_success(
                &UNBOUNDED,
                t0 + Duration::from_millis(5 * i),
                t0 + Duration::from_millis(5 * i),
            );
        }
        let at = t0 + Duration::from_millis(200);
        refused_burst(&mut learned, &UNBOUNDED, at, at, None);
        assert_rate(&learned, 200.0);
        // From here on it is the usual decrease, regain and probe.
        let later = at + Duration::from_millis(50);
        refused_burst(&mut learned, &UNBOUNDED, later, later, None);
        assert!((learned.per_sec() - 200.0 * DECREASE).abs() < 1e-9);
        let mut t = later;
        for _ in 0..1000 {
            t += Duration::from_millis(10);
            learned.on_success(&UNBOUNDED, t, t);
        }
        // Regained most of 200 within seconds, then probed by 2 /s per second.
        let rate = learned.per_sec();
        let regained = 200.0 * REGAIN_TARGET;
        assert!(
            rate > regained && rate < regained + 2.0 * 10.0 + 1.0,
            "{rate}"
        );
    }

    #[test]
    fn the_measurement_runs_from_the_first_send_not_the_latest() {
        let mut learned = UNBOUNDED.start();
        let t0 = Instant::now();
        // A send every 5 ms, each answered a millisecond later: 40 in 200 ms.
        for i in 0..40 {
            let sent = t0 + Duration::from_millis(5 * i);
            learned.on_send(sent);
            learned.on_success(
                &UNBOUNDED,
                sent + Duration::from_millis(1),
                sent + Duration::from_millis(1),
            );
        }
        let at = t0 + Duration::from_millis(200);
        refused_burst(&mut learned, &UNBOUNDED, at, at, None);
        assert_rate(&learned, 200.0);
    }

    #[test]
    fn before_any_success_the_first_rate_is_low_and_slow_start_lifts_it() {
        // Long calls: a 429 comes back before any success does. One send
        // per 100 ms so far is all that is known to get through.
        let mut learned = UNBOUNDED.start();
        let t0 = Instant::now();
        learned.on_send(t0);
        let at = t0 + Duration::from_millis(100);
        assert_eq!(
            refused_burst(&mut learned, &UNBOUNDED, at, at, None),
            Throttle::Changed
        );
        assert_rate(&learned, 10.0);
        // Three seconds of successes: slow start doubles it each second.
        let mut t = at;
        for _ in 0..300 {
            t += Duration::from_millis(10);
            learned.on_success(&UNBOUNDED, t, t);
        }
        assert!(
            (learned.per_sec() - 80.0).abs() < 1.0,
            "{}",
            learned.per_sec()
        );
        // The next 429 ends slow start: a decrease, then only regain and probe.
        refused_burst(&mut learned, &UNBOUNDED, t, t, None);
        let low = learned.per_sec();
        for _ in 0..100 {
            t += Duration::from_millis(10);
            learned.on_success(&UNBOUNDED, t, t);
        }
        assert!(
            learned.per_sec() < low * 1.5,
            "{} from {low}",
            learned.per_sec()
        );
    }

    #[test]
    fn five_successes_measure_a_rate_that_a_long_wait_does_not_override() {
        let mut learned = UNBOUNDED.start();
        let t0 = Instant::now();
        learned.on_send(t0);
        for i in 1..=5 {
            learned.on_success(
                &UNBOUNDED,
                t0 + Duration::from_millis(20 * i),
                t0 + Duration::from_millis(20 * i),
            );
        }
        // A 429 naming a second: with five successes in 100 ms measured,
        // the key's rate is theirs (50 a second), not a window's reset.
        let at = t0 + Duration::from_millis(100);
        refused_burst(
            &mut learned,
            &UNBOUNDED,
            at,
            at,
            Some(Duration::from_secs(1)),
        );
        assert_rate(&learned, 50.0);
        // Measured, not guessed: slow start lifts it a quarter a second.
        assert_eq!(learned.slow_start, Some(SLOW_START_MEASURED));
    }

    #[test]
    fn a_first_estimate_never_falls_below_the_floor() {
        let mut learned = UNBOUNDED.start();
        let t0 = Instant::now();
        learned.on_send(t0);
        for i in 1..=5 {
            learned.on_success(
                &UNBOUNDED,
                t0 + Duration::from_secs(10 * i),
                t0 + Duration::from_secs(10 * i),
            );
        }
        let at = t0 + Duration::from_secs(60);
        refused_burst(&mut learned, &UNBOUNDED, at, at, None);
        assert_eq!(learned.per_sec(), 1.0);
    }
}

/// Drives `learned` for `secs` seconds in 10 ms ticks: each tick sends
/// what the rate allows (at most `demand` a second), answered at once by
/// `answer(n)` (true: success; n counts sends). Returns the final rate.
fn drive(
    learned: &mut Learned,
    bounds: &AdaptiveRate,
    demand: f64,
    secs: u32,
    mut answer: impl FnMut(u64, Instant) -> bool,
) -> f64 {
    let t0 = Instant::now();
    let mut credit = 0.0;
    let mut n = 0u64;
    for tick in 1..=secs * 100 {
        let now = t0 + Duration::from_millis(u64::from(tick) * 10);
        credit += learned.per_sec().min(demand) * 0.01;
        while credit >= 1.0 {
            credit -= 1.0;
            n += 1;
            learned.on_send(now);
            if answer(n, now) {
                learned.on_success(bounds, now, now);
            } else {
                learned.on_throttle(bounds, now, now, None);
            }
        }
    }
    learned.per_sec()
}

#[test]
fn a_rate_limit_brings_the_rate_down_to_it_and_keeps_it_near() {
    // A token bucket of 50 a second (bursts of 2); the clients want 400.
    let bounds = AdaptiveRate {
        min_per_sec: 1.0,
        max_per_sec: f64::INFINITY,
    };
    let mut learned = bounds.start();
    let (mut tokens, mut last) = (2.0f64, Instant::now());
    let mut throttled = 0u32;
    let rate = drive(&mut learned, &bounds, 400.0, 30, |_, now| {
        tokens = (tokens + 50.0 * (now - last).as_secs_f64()).min(2.0);
        last = now;
        let ok = tokens >= 1.0;
        if ok {
            tokens -= 1.0;
        } else {
            throttled += 1;
        }
        ok
    });
    assert!(rate > 30.0 && rate < 65.0, "{rate}");
    // 30 s at about 50 a second: the 429s are a small share of ~1 500 sends.
    assert!(throttled < 300, "{throttled}");
}

#[test]
fn a_learned_rate_stays_finite_however_long_the_successes_last() {
    let bounds = AdaptiveRate {
        min_per_sec: 1.0,
        max_per_sec: f64::INFINITY,
    };
    let mut learned = bounds.start();
    let t0 = Instant::now();
    learned.on_send(t0);
    refused_burst(
        &mut learned,
        &bounds,
        t0,
        t0,
        Some(Duration::from_millis(100)),
    );
    // A day of one success a second: slow start and the probe never stop
    // the climb, but it ends at a finite ceiling, still paced.
    for s in 1..=86_400u64 {
        learned.on_success(
            &bounds,
            t0 + Duration::from_secs(s),
            t0 + Duration::from_secs(s),
        );
    }
    assert!(learned.per_sec().is_finite(), "{}", learned.per_sec());
    assert!(learned.interval() > Duration::ZERO);
}

#[test]
fn the_rest_of_the_first_burst_refines_the_first_rate_down_only() {
    let bounds = AdaptiveRate {
        min_per_sec: 1.0,
        max_per_sec: f64::INFINITY,
    };
    let mut learned = bounds.start();
    let t0 = Instant::now();
    learned.on_send(t0);
    let at = t0 + Duration::from_millis(20);
    let ms = Duration::from_millis;
    // The first 429 came 2 ms before a token: 500 a second, at most.
    assert_eq!(
        refused_burst(&mut learned, &bounds, t0, at, Some(ms(2))),
        Throttle::Changed
    );
    assert!((learned.per_sec() - 500.0).abs() < 1e-9);
    // The burst's other 429s named up to 5 ms: the bucket's period.
    assert_eq!(
        learned.on_throttle(&bounds, t0, at, Some(ms(5))),
        Throttle::Changed
    );
    assert_ne!(
        learned.on_throttle(&bounds, t0, at, Some(ms(3))),
        Throttle::Changed
    );
    assert!(
        learned.on_throttle(&bounds, t0, at, Some(ms(5))) != Throttle::Changed,
        "the same period again changes nothing"
    );
    assert!((learned.per_sec() - 200.0).abs() < 1e-9);
    // A 429 for a later send is a congestion event, not a refinement.
    let later = at + ms(10);
    assert_eq!(
        refused_burst(&mut learned, &bounds, later, later, Some(ms(50))),
        Throttle::Changed
    );
    assert!((learned.per_sec() - 200.0 * DECREASE).abs() < 1e-9);
    // And the refining is over: a quiet 429 naming a longer wait changes nothing.
    assert_ne!(
        learned.on_throttle(&bounds, at, later, Some(ms(50))),
        Throttle::Changed
    );
}

#[test]
fn a_refined_first_rate_is_not_cut_by_sends_made_before_the_refinement() {
    let bounds = UNBOUNDED;
    let mut learned = bounds.start();
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    learned.on_send(t0);
    // The first estimate: 3 ms to the next token, 333 a second.
    let first = t0 + ms(20);
    refused_burst(&mut learned, &bounds, t0, first, Some(ms(3)));
    assert!((learned.per_sec() - 1000.0 / 3.0).abs() < 1e-6);
    // A send went at that rate; then a 429 of the first burst named the
    // bucket's real period, 5 ms.
    let sent_at_first_rate = first + ms(5);
    let refined = first + ms(10);
    assert_eq!(
        learned.on_throttle(&bounds, t0, refined, Some(ms(5))),
        Throttle::Changed
    );
    assert!((learned.per_sec() - 200.0).abs() < 1e-9);
    // That send's 429 is news about the rate it went at, not about the
    // refined one: no cut below the bucket's own rate.
    let answered = refined + ms(10);
    learned.on_throttle(&bounds, sent_at_first_rate, answered, Some(ms(1)));
    assert!(
        (learned.per_sec() - 200.0).abs() < 1e-9,
        "cut to {}",
        learned.per_sec()
    );
    // A closer look read on another thread just before the first estimate
    // (its `now` trails it) does not move the quiet span back: a 429 of a
    // send made before the first estimate is still no congestion event.
    let mut other = bounds.start();
    other.on_send(t0);
    refused_burst(&mut other, &bounds, t0, first, Some(ms(3)));
    other.on_throttle(&bounds, t0, first - ms(2), Some(ms(5)));
    assert!((other.per_sec() - 200.0).abs() < 1e-9);
    other.on_throttle(&bounds, first - ms(1), refined, Some(ms(1)));
    assert!(
        (other.per_sec() - 200.0).abs() < 1e-9,
        "cut to {}",
        other.per_sec()
    );
    // A 429 for a send made at the refined rate is a congestion event.
    let later = answered + ms(5);
    assert_eq!(
        refused_burst(&mut learned, &bounds, later, later, Some(ms(1))),
        Throttle::Changed
    );
    assert!((learned.per_sec() - 200.0 * DECREASE).abs() < 1e-9);
}

const UNBOUNDED: AdaptiveRate = AdaptiveRate {
    min_per_sec: 1.0,
    max_per_sec: f64::INFINITY,
};

#[tokio::test(start_paused = true)]
async fn a_stated_quota_paces_an_unmeasured_key_and_caps_a_learned_one() {
    let t0 = Instant::now();
    let mut learned = UNBOUNDED.start();
    assert!(learned.unmeasured());
    learned.on_stated(10.0, t0);
    assert_eq!(learned.per_sec(), 10.0, "paced from the statement on");
    // 429s of sends that went before it belong to no decrease.
    assert_ne!(
        learned.on_throttle(&UNBOUNDED, t0, t0, None),
        Throttle::Changed
    );
    // Successes never take it past the stated rate.
    let mut at = t0;
    for _ in 0..500 {
        at += Duration::from_millis(10);
        learned.on_success(&UNBOUNDED, at, at);
    }
    assert_eq!(learned.per_sec(), 10.0);
    // A lower statement lowers it; nonsense states nothing.
    learned.on_stated(5.0, at);
    learned.on_stated(f64::NAN, at);
    learned.on_stated(0.0, at);
    assert_eq!(learned.per_sec(), 5.0);
}

#[tokio::test(start_paused = true)]
async fn a_long_wait_on_an_unmeasured_key_is_a_window_reset_not_a_rate() {
    let t0 = Instant::now();
    let mut learned = UNBOUNDED.start();
    learned.on_send(t0);
    tokio::time::advance(Duration::from_millis(5)).await;
    let now = Instant::now();
    // "Come back in 1 s" to a key with nothing measured: the queue leaves
    // fast when it ends, not one send a second.
    assert_eq!(
        refused_burst(
            &mut learned,
            &UNBOUNDED,
            t0,
            now,
            Some(Duration::from_secs(1))
        ),
        Throttle::Changed
    );
    assert_eq!(learned.per_sec(), RELEASE_AFTER_RESET);
    // A wait named to the millisecond is a bucket's next token: its rate.
    let mut bucket = UNBOUNDED.start();
    bucket.on_send(t0);
    assert_eq!(
        refused_burst(
            &mut bucket,
            &UNBOUNDED,
            t0,
            now,
            Some(Duration::from_millis(10))
        ),
        Throttle::Changed
    );
    assert!(
        (bucket.per_sec() - 100.0).abs() < 1e-6,
        "{}",
        bucket.per_sec()
    );
}

#[test]
fn a_first_rate_reads_the_longest_wait_its_burst_named() {
    // A burst's first 429s name the bucket's period (10 ms); its later ones
    // come nearer the next token (6 ms), and one of those starts the rate.
    let ms = Duration::from_millis;
    let first_rate = |then: Duration| {
        let mut learned = UNBOUNDED.start();
        let t0 = Instant::now();
        learned.on_send(t0);
        learned.on_throttle(&UNBOUNDED, t0, t0, Some(ms(10)));
        refused_burst(&mut learned, &UNBOUNDED, t0, t0 + then, Some(ms(6)));
        learned
    };
    assert_rate(&first_rate(ms(1)), 100.0);
    // Within a second, the second itself included.
    assert_rate(&first_rate(BURST_SPAN), 100.0);
    // Named over a second before: another burst's, which says nothing of
    // this one.
    assert_rate(&first_rate(BURST_SPAN + ms(1)), 1000.0 / 6.0);
    // A burst's own longest wait counts, however long the wait another
    // burst named before it.
    let mut learned = UNBOUNDED.start();
    let t0 = Instant::now();
    learned.on_send(t0);
    learned.on_throttle(&UNBOUNDED, t0, t0, Some(ms(20)));
    let later = t0 + BURST_SPAN + ms(100);
    learned.on_throttle(&UNBOUNDED, later, later, Some(ms(8)));
    refused_burst(&mut learned, &UNBOUNDED, later, later + ms(1), Some(ms(5)));
    assert_rate(&learned, 125.0);
}

#[test]
fn only_a_short_wait_named_to_the_millisecond_reads_as_a_token_bucket() {
    let ms = Duration::from_millis;
    assert_eq!(LONGEST_TOKEN_WAIT, ms(250));
    assert_eq!(precise(Some(ms(1))), Some(ms(1)));
    assert_eq!(precise(Some(ms(249))), Some(ms(249)));
    assert_eq!(precise(Some(ms(250))), None, "a window's reset, not a rate");
    assert_eq!(precise(Some(Duration::from_secs(2))), None);
    assert_eq!(precise(Some(Duration::from_micros(999))), None);
    assert_eq!(precise(None), None);
}

#[test]
fn a_refusal_that_ended_its_request_caps_the_rate_that_drew_it() {
    // Behind a gateway that forbids retrying, each probe past the key's
    // room costs a request: the rate never rises past what drew one.
    let run = |final_answer: bool| {
        let mut learned = BOUNDS.start();
        let t0 = Instant::now();
        learned.per_sec = 50.0;
        refused_burst(&mut learned, &BOUNDS, t0, t0, None);
        if final_answer {
            learned.cap_at_refusal(&BOUNDS);
        }
        let mut at = t0;
        for _ in 0..2_000 {
            at += Duration::from_millis(10);
            learned.on_success(&BOUNDS, at, at);
        }
        learned.per_sec()
    };
    assert!((run(true) - 50.0 * DECREASE).abs() < 1e-9, "{}", run(true));
    assert!(
        run(false) > 55.0,
        "without it the rate probes on: {}",
        run(false)
    );
}

#[test]
fn a_first_rate_measured_from_final_refusals_keeps_a_margin_under_them() {
    // A bucket of 100 a second refuses a burst, naming the wait to its
    // next token rounded up to the millisecond: the burst arrived spread
    // over a millisecond, so the longest wait named is 9 ms, and the rate
    // read from it (111 a second) is above the bucket's. No retry is
    // allowed: every send past the bucket's rate loses a request.
    let ms = Duration::from_millis;
    let mut learned = UNBOUNDED_START.start();
    let t0 = Instant::now();
    learned.on_send(t0);
    refused_burst(&mut learned, &UNBOUNDED_START, t0, t0, Some(ms(9)));
    assert_rate(&learned, 1000.0 / 9.0);
    learned.cap_at_refusal(&UNBOUNDED_START);
    let capped = 1000.0 / 9.0 * DECREASE;
    assert_rate(&learned, capped);
    assert!(
        learned.per_sec() < 0.9 * 100.0,
        "a margin under the bucket's rate: {}",
        learned.per_sec()
    );
    let mut at = t0;
    for _ in 0..2_000 {
        at += ms(10);
        learned.on_success(&UNBOUNDED_START, at, at);
    }
    assert_rate(&learned, capped);
}

#[test]
fn final_refusals_of_one_congestion_event_cap_the_rate_once() {
    // A stated 50 a second. Final 429s of sends made before the statement
    // belong to no cut, and cap nothing; then a burst of final 429s: the
    // first cuts and caps, the rest belong to that cut. Each used to cap
    // again, a fifth off every time (50 → 40 → 32 → … → 5 after ten).
    let t0 = Instant::now();
    let mut learned = UNBOUNDED_START.start();
    learned.on_stated(50.0, t0);
    let refuse = |learned: &mut Learned, sent: Instant, at: Instant| {
        (0..10)
            .filter(|_| {
                learned.on_refusal(&UNBOUNDED_START, sent, at, None, true) == Throttle::Changed
            })
            .count()
    };
    let at = t0 + Duration::from_millis(20);
    assert_eq!(refuse(&mut learned, t0, at), 0);
    assert_rate(&learned, 50.0);
    assert_eq!(learned.refused_at, None);
    let (sent, at) = (at, at + Duration::from_millis(20));
    assert_eq!(refuse(&mut learned, sent, at), 1);
    assert_rate(&learned, 50.0 * DECREASE);
    assert_eq!(learned.refused_at, Some(50.0 * DECREASE));
}

#[test]
fn final_refusals_whatever_the_rate_cut_no_deeper_than_a_cut_may_go() {
    // Every answer a final 429 of its own congestion event: before a
    // judgement, a cut takes the rate to half the last judged rate at
    // most, and so does the cap its refusal sets.
    let t0 = Instant::now();
    let mut learned = BOUNDS.start();
    let mut at = t0;
    for _ in 0..20 {
        at += Duration::from_millis(100);
        let did = learned.on_refusal(&BOUNDS, at, at, None, true);
        assert_ne!(did, Throttle::StoodDown, "fewer answers than a trial");
        assert!(
            learned.per_sec() >= 100.0 / 2.0 - 1e-9,
            "{}",
            learned.per_sec()
        );
    }
}

#[test]
fn final_refusals_in_doubt_or_standing_down_cap_nothing() {
    // The refusals did not follow the rate: the key stood down to its
    // ceiling, and for a while its refusals, final or not, change nothing.
    let t0 = Instant::now();
    let mut learned = BOUNDS.start();
    learned.stand_down(&BOUNDS, t0);
    let soon = t0 + Duration::from_secs(1);
    for _ in 0..10 {
        assert_eq!(
            learned.on_refusal(&BOUNDS, soon, soon, None, true),
            Throttle::Kept
        );
    }
    assert_rate(&learned, 100.0);
    assert_eq!(learned.refused_at, None);
}

const UNBOUNDED_START: AdaptiveRate = AdaptiveRate {
    min_per_sec: 1.0,
    max_per_sec: f64::INFINITY,
};

mod stand_down {
    use super::*;

    const UNBOUNDED: AdaptiveRate = AdaptiveRate {
        min_per_sec: 1.0,
        max_per_sec: f64::INFINITY,
    };

    /// A key taught a rate by a burst of refusals, then answered every
    /// 10 ms, refused when `refused(n)`: how many answers until the rate
    /// stood down (if it did), and the rate at the end.
    fn after_burst(refused: impl Fn(u32) -> bool) -> (Option<u32>, f64) {
        let (stood_down, rate, _) = lowest_after_burst(refused);
        (stood_down, rate)
    }

    /// As [`after_burst`], with the lowest rate the key was paced at, as a
    /// share of the rate the burst taught it.
    fn lowest_after_burst(refused: impl Fn(u32) -> bool) -> (Option<u32>, f64, f64) {
        let mut learned = UNBOUNDED.start();
        let t0 = Instant::now();
        learned.on_send(t0);
        for i in 1..=10 {
            learned.on_success(&UNBOUNDED, t0, t0 + Duration::from_millis(i));
        }
        let mut at = t0 + Duration::from_millis(100);
        refused_burst(&mut learned, &UNBOUNDED, t0, at, None);
        assert!(!learned.unmeasured(), "the burst set a rate");
        let taught = learned.per_sec();
        let mut lowest = taught;
        let mut stood_down = None;
        for n in 0..1_000 {
            at += Duration::from_millis(10);
            if !refused(n) {
                learned.on_success(&UNBOUNDED, at, at);
            } else if learned.on_throttle(&UNBOUNDED, at, at, None) == Throttle::StoodDown {
                stood_down.get_or_insert(n);
            }
            if stood_down.is_none() {
                lowest = lowest.min(learned.per_sec());
            }
        }
        (stood_down, learned.per_sec(), lowest / taught)
    }

    /// Refused at random, `pct` in a hundred answers.
    fn at_random(pct: u64) -> impl Fn(u32) -> bool {
        move |n| (u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % 100 < pct
    }

    #[test]
    fn refusals_at_random_never_sink_the_rate_before_it_stands_down() {
        // Two answers in five refused, whatever the rate: nearly every
        // refusal is a congestion event of its own, and each used to cut
        // before the first judgement (a rate of 260 a second sank to 10).
        for pct in [25, 40, 55] {
            let (stood_down, rate, lowest) = lowest_after_burst(at_random(pct));
            assert!(stood_down.is_some(), "{pct} %: stood down");
            assert!(rate.is_infinite(), "{pct} %: unpaced again: {rate}");
            assert!(lowest >= 0.25, "{pct} %: paced at {lowest} of its rate");
        }
    }

    #[test]
    fn refusals_at_random_stand_the_learned_rate_down() {
        // One answer in seven refused, whatever the rate.
        let (stood_down, rate) = after_burst(|n| n % 7 == 3);
        let at = stood_down.expect("stood down");
        assert!(at < 200, "after {at} answers");
        assert!(rate.is_infinite(), "unpaced again: {rate}");
    }

    #[test]
    fn refusals_at_random_to_a_quarter_stand_it_down_too() {
        // One answer in four refused, whatever the rate: each judgement
        // after the burst sees about the same share, however the cuts
        // went. Compared with the share the burst engaged at (most
        // answers), any share looks lower: only a share lower by more than
        // chance explains (1.5 spreads) is help.
        // Spread at random: some judgements see fewer, which must not
        // read as the cuts helping.
        let (stood_down, rate) = after_burst(at_random(25));
        let at = stood_down.expect("stood down");
        assert!(at < 300, "after {at} answers");
        assert!(rate.is_infinite(), "unpaced again: {rate}");
    }

    #[test]
    fn the_odd_refusal_of_a_rate_at_capacity_does_not() {
        // A probe past the key's room now and then: one in fifty.
        let (stood_down, rate) = after_burst(|n| n % 50 == 49);
        assert_eq!(stood_down, None);
        assert!(rate.is_finite());
    }

    #[test]
    fn refusals_that_stay_most_answers_stand_it_down_once_the_cuts_halved_it() {
        // Seven answers in ten refused, whatever the rate: it stands down,
        // and for a while its refusals cut nothing.
        let (stood_down, rate) = after_burst(|n| n % 10 < 7);
        assert!(stood_down.is_some(), "stood down");
        assert!(rate.is_infinite(), "unpaced again: {rate}");
    }

    #[test]
    fn a_stood_down_key_with_a_stated_rate_is_not_cut_for_a_while() {
        let t0 = Instant::now();
        let mut learned = UNBOUNDED.start();
        learned.on_stated(50.0, t0);
        learned.stand_down(&UNBOUNDED, t0);
        assert!((learned.per_sec() - 50.0).abs() < 1e-9, "the stated rate");
        let soon = t0 + DOUBT_FOR - Duration::from_secs(1);
        for _ in 0..100 {
            assert_eq!(
                learned.on_throttle(&UNBOUNDED, soon, soon, None),
                Throttle::Kept
            );
        }
        assert!(
            (learned.per_sec() - 50.0).abs() < 1e-9,
            "not cut: {}",
            learned.per_sec()
        );
        let later = t0 + DOUBT_FOR;
        assert_eq!(
            learned.on_throttle(&UNBOUNDED, later, later, None),
            Throttle::Changed,
            "evidence decays"
        );
    }

    #[test]
    fn a_final_refusal_at_the_floor_keeps_the_rate_at_the_floor() {
        let bounds = AdaptiveRate {
            min_per_sec: 2.0,
            max_per_sec: f64::INFINITY,
        };
        let t0 = Instant::now();
        let mut learned = bounds.start();
        learned.on_send(t0);
        refused_burst(
            &mut learned,
            &bounds,
            t0,
            t0,
            Some(Duration::from_millis(200)),
        );
        // Cut to the floor by the refusals that drew it.
        learned.per_sec = 2.0;
        learned.last_throttled = Some(2.0);
        learned.cap_at_refusal(&bounds);
        let mut at = t0;
        for _ in 0..500 {
            at += Duration::from_millis(10);
            learned.on_success(&bounds, at, at);
            assert!(learned.per_sec() >= 2.0, "{}", learned.per_sec());
        }
    }
}

mod judgement {
    use super::*;

    /// A paced key judged on `refused` of `answers` answers since its last
    /// cut, which drew a share of `at_cut` at 100 sends a second, now at
    /// `rate`: what the judging refusal did.
    fn judged(at_cut: f64, refused: u32, answers: u32, rate: f64) -> Throttle {
        let now = Instant::now();
        let mut learned = UNBOUNDED_START.start();
        learned.per_sec = rate;
        learned.share_at_cut = Some(at_cut);
        learned.rate_at_cut = Some(100.0);
        learned.quiet_until = Some(now);
        learned.trial = (answers - refused, refused - 1);
        let later = now + Duration::from_millis(10);
        learned.on_throttle(&UNBOUNDED_START, later, later, None)
    }

    #[test]
    fn a_share_is_one_standard_deviation_of_its_answers_from_chance() {
        assert!((spread(0.5, 25) - 0.1).abs() < 1e-12);
        assert!((spread(0.1, 9) - 0.1).abs() < 1e-12);
        assert_eq!(spread(0.0, 30), 0.0);
    }

    #[test]
    fn cuts_helped_only_if_the_share_fell_by_more_than_chance() {
        // Half refused at the cut; 30 answers since: 1.5 σ is 0.137, so a
        // share under 0.363 is help, one above is not (and stands down).
        assert_eq!(judged(0.5, 10, 30, 90.0), Throttle::Changed);
        assert_eq!(judged(0.5, 11, 30, 90.0), Throttle::StoodDown);
        // A share under the noise floor is help whatever drew the cut.
        assert_eq!(judged(0.05, 2, 30, 90.0), Throttle::Changed);
        assert_eq!(judged(0.05, 3, 30, 90.0), Throttle::StoodDown);
    }

    #[test]
    fn a_share_that_stays_high_stands_down_once_the_next_cut_reaches_half() {
        // Seven in ten refused, as at the cut: not help, and above the
        // engaging share, so it stands down only at the floor a judgement
        // sets (the next cut would reach half of 100).
        assert_eq!(judged(0.7, 21, 30, 62.5), Throttle::StoodDown);
        assert_eq!(judged(0.7, 21, 30, 62.6), Throttle::Changed);
    }

    #[test]
    fn a_cut_never_raises_a_rate_a_stated_quota_put_under_its_floor() {
        // Released fast after a window's reset (1 000 a second), then told
        // 120 a minute: a 429 keeps the rate at most there.
        let now = Instant::now();
        let mut learned = UNBOUNDED_START.start();
        learned.per_sec = 1_000.0;
        learned.rate_at_cut = Some(1_000.0);
        learned.on_stated(2.0, now);
        let later = now + Duration::from_millis(10);
        learned.on_throttle(&UNBOUNDED_START, later, later, None);
        assert!(learned.per_sec() <= 2.0, "{}", learned.per_sec());
    }
}
