//! A waker that does nothing, for polling a future or body once to see
//! what it has ready now (`Waker::noop` needs a newer Rust than the MSRV).

use std::sync::{Arc, OnceLock};
use std::task::{Wake, Waker};

/// The shared no-op waker.
pub(crate) fn noop_waker() -> Waker {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    static NOOP: OnceLock<Waker> = OnceLock::new();
    NOOP.get_or_init(|| Waker::from(Arc::new(Noop))).clone()
}
