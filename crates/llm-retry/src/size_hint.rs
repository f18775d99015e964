//! Size hints of bodies that yield bytes already held, then the rest of an
//! inner body.

use http_body::SizeHint;

/// The hint for `held` bytes followed by a body hinting `rest` (`None`
/// when nothing follows). Saturates instead of overflowing.
pub(crate) fn held_then(held: u64, rest: Option<SizeHint>) -> SizeHint {
    let Some(rest) = rest else {
        return SizeHint::with_exact(held);
    };
    let mut out = SizeHint::new();
    out.set_lower(rest.lower().saturating_add(held));
    if let Some(upper) = rest.upper() {
        out.set_upper(upper.saturating_add(held));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_bytes_add_to_both_bounds_and_saturate() {
        assert_eq!(held_then(5, None).exact(), Some(5));
        assert_eq!(
            held_then(5, Some(SizeHint::with_exact(7))).exact(),
            Some(12)
        );
        let open = held_then(5, Some(SizeHint::new()));
        assert_eq!((open.lower(), open.upper()), (5, None));
        let huge = held_then(u64::MAX, Some(SizeHint::with_exact(1)));
        assert_eq!(huge.exact(), Some(u64::MAX));
    }
}
