//! One key's state: when the sweep may drop it, and what its window
//! counts.
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
    let fresh = || KeyState::new(None, now);
    assert!(fresh().idle(now), "a key nothing has used");
    assert!(
        KeyState::new(Some(&BOUNDS), now).idle(now),
        "a learned key with no send queued"
    );

    let mut held = fresh();
    held.held_until = Some(later);
    assert!(!held.idle(now));
    assert!(held.idle(later), "the hold is over");

    let mut paced = fresh();
    paced.requests = Tat(Some(later));
    assert!(!paced.idle(now));
    assert!(paced.idle(later));

    let mut probing = fresh();
    probing.probing = 1;
    assert!(!probing.idle(now), "a send waits for news of its window");

    let mut window = fresh();
    window.window = Some(Window::new(Some(later), 5, 0, now));
    assert!(!window.idle(now), "the provider's window stands");
    assert!(window.idle(later), "and then it reset");
    window.window = Some(Window::new(None, 5, 0, now));
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

    let mut queued = KeyState::new(Some(&BOUNDS), now);
    let learned = queued.learned.as_mut().unwrap();
    learned.rate.on_stated(1.0, now);
    let interval = learned.rate.interval();
    learned.schedule.take(now, interval);
    learned.schedule.take(now, interval);
    assert!(!queued.idle(now), "a second send is booked a second on");
    assert!(
        !queued.idle(later),
        "a third would go a second after the second: dropping the key would send it now"
    );
    assert!(queued.idle(later + Duration::from_secs(1)));
}

#[tokio::test(start_paused = true)]
async fn a_window_counts_its_probes_and_queued_shares_until_they_leave() {
    let now = Instant::now();
    let mut key = KeyState::new(None, now);
    key.window = Some(Window::new(None, 0, 0, now));
    let probe = key.window_place(now);
    assert!(matches!(probe, Place::Probe { .. }));
    key.enter_window(probe, None);
    key.enter_window(probe, None);
    assert_eq!(key.probing, 2);
    key.leave_window(probe, false);
    assert_eq!(key.probing, 1);

    key.window = Some(Window::new(Some(now + Duration::from_secs(60)), 2, 1, now));
    let share = key.window_place(now);
    assert_eq!(share, Place::Took(1));
    key.enter_window(share, None);
    key.enter_window(share, None);
    assert_eq!(key.queued_shares, 2);
    assert_eq!(
        key.window_place(now),
        Place::AfterReset(now + Duration::from_secs(60))
    );
    key.leave_window(share, true);
    assert_eq!(key.queued_shares, 1);
    assert_eq!(key.window_place(now), Place::Took(1), "the share came back");
}

#[tokio::test(start_paused = true)]
async fn an_answer_of_a_spent_window_with_no_reset_is_news_unless_the_window_was_so_already() {
    let now = Instant::now();
    let later = now + Duration::from_secs(10);
    // What a send finds after the key's window was `before` and an answer
    // then said none is left, and no reset.
    let after_spent_news = |before: Window| {
        let mut key = KeyState::new(None, now);
        key.window = Some(before);
        let epoch = before.epoch();
        key.restate_window(Some((None, 0)), now);
        let window = key.window.unwrap();
        (window.place(now), window.epoch() == epoch)
    };
    let probe = |place| matches!(place, Place::Probe { .. });
    // A window with shares left, or with a known reset: now spent with
    // none known, so a send probes.
    let (place, kept) = after_spent_news(Window::new(Some(later), 5, 0, now));
    assert!(probe(place) && !kept, "{place:?}");
    let (place, kept) = after_spent_news(Window::new(None, 5, 0, now));
    assert!(probe(place) && !kept, "{place:?}");
    let (place, kept) = after_spent_news(Window::new(Some(later), 0, 0, now));
    assert!(probe(place) && !kept, "{place:?}");
    // Already spent with no reset: no news, the probes keep their turns.
    let (place, kept) = after_spent_news(Window::new(None, 0, 0, now));
    assert!(probe(place) && kept, "{place:?}");
}
