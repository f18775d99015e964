//! Two failovers (two replicas) in front of the same targets, sharing
//! their marks: what one learns, the other skips.

use super::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Marks in memory, the later one kept: the contract of a shared store.
#[derive(Debug, Default)]
struct InMemory(Mutex<HashMap<(String, MarkKind), Mark>>);

impl SharedMarks for InMemory {
    fn publish(&self, target: &str, kind: MarkKind, mark: Mark) {
        let mut marks = self.0.lock().unwrap();
        let entry = marks.entry((target.to_owned(), kind)).or_insert(mark);
        if mark.until > entry.until {
            *entry = mark;
        }
    }

    fn read(&self, target: &str, kind: MarkKind) -> Option<Mark> {
        self.0
            .lock()
            .unwrap()
            .get(&(target.to_owned(), kind))
            .copied()
    }
}

impl InMemory {
    /// The one mark of `kind` published, and its name.
    fn only(&self, kind: MarkKind) -> (String, Mark) {
        let marks = self.0.lock().unwrap();
        let mut of_kind = marks.iter().filter(|((_, k), _)| *k == kind);
        let ((name, _), mark) = of_kind.next().unwrap();
        assert!(of_kind.next().is_none(), "one mark of {kind:?}");
        (name.clone(), *mark)
    }
}

/// Replica `n`'s failover: `a` (set up by `a_setup`) first, then `b`.
fn replica(
    a: &MockServer,
    b: &MockServer,
    marks: &Arc<InMemory>,
    a_setup: impl Fn(Target<Svc>) -> Target<Svc>,
) -> Failover<Svc> {
    let shared: Arc<dyn SharedMarks> = marks.clone();
    Failover::builder(vec![
        a_setup(target("a", a)).shared_marks(shared),
        target("b", b),
    ])
    .build()
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_cooldown_learned_by_one_replica_is_honoured_by_the_other() {
    let a = upstream(Route::sequence([
        rate_limited("5"),
        Reply::anthropic_ok("a"),
    ]))
    .await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let marks = Arc::new(InMemory::default());
    let first = replica(&a, &b, &marks, Target::cooldown);
    let second = replica(&a, &b, &marks, Target::cooldown);
    assert_eq!(first.oneshot(request()).await.unwrap().status(), 200);
    // Kept for the model the request named, under a tag: the store's keys
    // hold no text of a request's.
    let (name, mark) = marks.only(MarkKind::Cooldown);
    assert!(name.starts_with("a#model:"), "{name}");
    assert!(!name.contains("claude"), "{name}");
    let (until, rate_limited) = (mark.until, mark.rate_limited);
    assert!(rate_limited);
    assert!(until >= Instant::now() + Duration::from_secs(5));
    let skipped = report(&second.clone().oneshot(request()).await.unwrap());
    assert_eq!(
        outcomes(&skipped),
        [
            ("a", 1, "skipped cooling_down".to_owned()),
            ("b", 1, "answered 200".to_owned())
        ]
    );
    assert_eq!(a.request_count(), 1, "the second replica never sent to a");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = report(&second.oneshot(request()).await.unwrap());
    assert_eq!(outcomes(&later), [("a", 1, "answered 200".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn a_cooldown_shared_for_one_model_leaves_the_target_to_the_others() {
    let (a, b) = one_model_held().await;
    let marks = Arc::new(InMemory::default());
    let first = replica(&a, &b, &marks, Target::cooldown);
    let second = replica(&a, &b, &marks, Target::cooldown);
    let refused = report(&first.oneshot(request_for("claude-opus-4-5")).await.unwrap());
    assert_eq!(
        outcomes(&refused)[0],
        ("a", 1, "rejected rate_limited".to_owned())
    );
    let other = report(
        &second
            .clone()
            .oneshot(request_for("claude-haiku-4-5"))
            .await
            .unwrap(),
    );
    assert_eq!(outcomes(&other), [("a", 1, "answered 200".to_owned())]);
    let again = report(
        &second
            .oneshot(request_for("claude-opus-4-5"))
            .await
            .unwrap(),
    );
    assert_eq!(
        outcomes(&again)[0],
        ("a", 1, "skipped cooling_down".to_owned())
    );
    assert_eq!(
        a.request_count(),
        2,
        "the second replica sent only the other model to a"
    );
}

#[tokio::test(start_paused = true)]
async fn a_target_one_replica_found_unhealthy_is_skipped_by_the_other() {
    let a = upstream(Route::always(Reply::overloaded())).await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let marks = Arc::new(InMemory::default());
    let unhealthy = |t: Target<Svc>| t.unhealthy_after(2, Duration::from_secs(10));
    let first = replica(&a, &b, &marks, unhealthy);
    let second = replica(&a, &b, &marks, unhealthy);
    for _ in 0..2 {
        first.clone().oneshot(request()).await.unwrap();
    }
    assert_eq!(a.request_count(), 2);
    let skipped = report(&second.clone().oneshot(request()).await.unwrap());
    assert_eq!(
        outcomes(&skipped),
        [
            ("a", 1, "skipped unhealthy".to_owned()),
            ("b", 1, "answered 200".to_owned())
        ]
    );
    assert_eq!(a.request_count(), 2, "the second replica never sent to a");
    tokio::time::sleep(Duration::from_secs(10)).await;
    second.oneshot(request()).await.unwrap();
    assert_eq!(a.request_count(), 3, "tried again once the mark ended");
}
