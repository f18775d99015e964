//! A bound on retries *waiting* at once on one budget: past it a retry is
//! suppressed, never queued.

use super::RetryBudget;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How many retries are waiting, and how many may.
#[derive(Debug)]
pub(super) struct Admission {
    waiting: AtomicUsize,
    max: usize,
}

impl Admission {
    pub(super) fn unlimited() -> Admission {
        Admission::new(usize::MAX)
    }

    fn new(max: usize) -> Admission {
        Admission {
            waiting: AtomicUsize::new(0),
            max,
        }
    }
}

impl RetryBudget {
    /// Lets at most `max` retries of this budget wait (sleep before their
    /// resend) at once; the default is unlimited. `0` suppresses every
    /// retry that would wait.
    ///
    /// Set it while building the budget, before cloning it: clones taken
    /// earlier share the retry counts but keep their former limit.
    pub fn with_max_waiting(mut self, max: usize) -> RetryBudget {
        self.admission = Arc::new(Admission::new(max));
        self
    }

    /// Admits one more waiting retry, or refuses at once if `max` already
    /// wait. Hold the permit for the whole wait; dropping it (also when the
    /// request is cancelled mid-sleep) frees the place. Lock-free.
    pub(crate) fn try_admit_wait(&self) -> Result<WaitPermit, AdmissionFull> {
        let admission = &self.admission;
        let admitted = admission
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < admission.max).then_some(n + 1)
            });
        match admitted {
            Ok(_) => Ok(WaitPermit {
                admission: Arc::clone(admission),
            }),
            Err(_) => Err(AdmissionFull { max: admission.max }),
        }
    }

    /// Retries of this budget waiting now.
    pub fn waiting(&self) -> usize {
        self.admission.waiting.load(Ordering::Acquire)
    }
}

/// One admitted waiting retry; its place is freed on drop.
#[derive(Debug)]
#[must_use = "the wait is admitted only while the permit is held"]
pub(crate) struct WaitPermit {
    admission: Arc<Admission>,
}

impl Drop for WaitPermit {
    fn drop(&mut self) {
        self.admission.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A retry suppressed because its budget already has the most waiting
/// retries it admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AdmissionFull {
    max: usize,
}

impl AdmissionFull {
    /// The budget's limit on waiting retries.
    pub(crate) fn max_waiting(&self) -> usize {
        self.max
    }
}

impl fmt::Display for AdmissionFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "retry suppressed: {} {} already waiting on this retry budget (its limit)",
            self.max,
            if self.max == 1 {
                "retry is"
            } else {
                "retries are"
            },
        )
    }
}

impl std::error::Error for AdmissionFull {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn permits_are_bounded_and_released_on_drop() {
        let budget = RetryBudget::default().with_max_waiting(2);
        let other = budget.clone();
        let a = budget.try_admit_wait().unwrap();
        let b = other.try_admit_wait().unwrap();
        assert_eq!(budget.waiting(), 2);
        let full = budget.try_admit_wait().unwrap_err();
        assert_eq!(full.max_waiting(), 2);
        assert_eq!(
            full.to_string(),
            "retry suppressed: 2 retries are already waiting on this retry budget (its limit)"
        );
        drop(a);
        assert_eq!(other.waiting(), 1);
        let c = other.try_admit_wait().unwrap();
        drop((b, c));
        assert_eq!(budget.waiting(), 0);
    }

    /// (limit, attempts) → admitted.
    #[test]
    fn the_limit_is_exact() {
        let cases: [(usize, usize, usize); 4] = [(0, 3, 0), (1, 3, 1), (5, 5, 5), (5, 9, 5)];
        for (max, attempts, admitted) in cases {
            let budget = RetryBudget::default().with_max_waiting(max);
            let permits: Vec<_> = (0..attempts).map(|_| budget.try_admit_wait()).collect();
            let ok = permits.iter().filter(|p| p.is_ok()).count();
            assert_eq!(ok, admitted, "max {max}");
            assert_eq!(budget.waiting(), admitted, "max {max}");
        }
    }

    #[test]
    fn unlimited_by_default_and_independent_of_the_ratio() {
        let budget = RetryBudget::new(0.0, 0, std::time::Duration::from_secs(1)).unwrap();
        assert!(budget.try_withdraw().is_err());
        let permits: Vec<_> = (0..1000)
            .map(|_| budget.try_admit_wait().unwrap())
            .collect();
        assert_eq!(budget.waiting(), 1000);
        drop(permits);
        assert_eq!(budget.waiting(), 0);
    }

    #[test]
    fn a_permit_outlives_its_budget_and_a_new_limit() {
        let budget = RetryBudget::default().with_max_waiting(1);
        let permit = budget.try_admit_wait().unwrap();
        let budget = budget.with_max_waiting(1);
        let again = budget.try_admit_wait().unwrap();
        drop(budget);
        drop((permit, again));
    }

    #[test]
    fn threads_never_exceed_the_limit() {
        let budget = RetryBudget::default().with_max_waiting(3);
        let peak = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (budget, peak) = (budget.clone(), Arc::clone(&peak));
                s.spawn(move || {
                    for _ in 0..2000 {
                        if let Ok(permit) = budget.try_admit_wait() {
                            peak.fetch_max(budget.waiting(), Ordering::AcqRel);
                            std::hint::black_box(&permit);
                        }
                    }
                });
            }
        });
        assert!(peak.load(Ordering::Acquire) <= 3);
        assert_eq!(budget.waiting(), 0);
    }
}
