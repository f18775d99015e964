//! Bounded reads of an error's `Display`, for phrase markers.
//!
//! A `Display` can be arbitrarily long (an error may carry a whole body), so
//! only its first [`MAX_TEXT`] bytes are ever formatted.

use std::fmt::{self, Write as _};

/// How many bytes of one `Display` are read at most.
pub(super) const MAX_TEXT: usize = 4096;

/// The first [`MAX_TEXT`] bytes of `value`'s `Display`, ASCII-lowercased.
pub(super) fn lowercase_text<T: fmt::Display + ?Sized>(value: &T) -> String {
    let mut buf = Capped(String::new());
    // Stopping at the cap is the point: the prefix is what is searched.
    let _ = write!(buf, "{value}");
    buf.0.make_ascii_lowercase();
    buf.0
}

/// A `fmt::Write` that keeps at most [`MAX_TEXT`] bytes (cut on a char
/// boundary), then fails so the formatter stops early.
struct Capped(String);

impl fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = MAX_TEXT.saturating_sub(self.0.len());
        if s.len() <= room {
            self.0.push_str(s);
            return Ok(());
        }
        let mut end = room;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.0.push_str(&s[..end]);
        Err(fmt::Error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_capped_on_a_char_boundary() {
        let cases = [
            ("Connection RESET".to_owned(), "connection reset".to_owned()),
            ("a".repeat(MAX_TEXT + 10), "a".repeat(MAX_TEXT)),
            (
                format!("a{}", "é".repeat(MAX_TEXT)),
                format!("a{}", "é".repeat(MAX_TEXT / 2 - 1)),
            ),
            ("É".to_owned(), "É".to_owned()),
        ];
        for (input, want) in cases {
            assert_eq!(lowercase_text(input.as_str()), want);
        }
    }
}
