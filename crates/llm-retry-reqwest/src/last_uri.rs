//! [`LastUri`]: the `http::Uri` of the URL a client called last, so a
//! client that calls one endpoint again and again parses it once.

use std::fmt;
use std::sync::Mutex;

/// The URL of the last request and its `http::Uri`, shared by every
/// request through one middleware.
#[derive(Default)]
pub(crate) struct LastUri {
    last: Mutex<Option<(reqwest::Url, http::Uri)>>,
}

/// Shows nothing of the URL: its query may hold a key (`?key=…`).
impl fmt::Debug for LastUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LastUri")
    }
}

impl LastUri {
    /// `url` as an `http::Uri`: the one kept when `url` is the last URL,
    /// otherwise parsed (and kept). Never waits: while another request
    /// holds the lock it parses on its own.
    pub(crate) fn of(&self, url: &reqwest::Url) -> Result<http::Uri, http::uri::InvalidUri> {
        if let Ok(last) = self.last.try_lock() {
            // `Url` equality is equality of the whole serialization.
            if let Some((_, uri)) = last.as_ref().filter(|(kept, _)| kept == url) {
                return Ok(uri.clone());
            }
        }
        let uri = http::Uri::try_from(url.as_str())?;
        if let Ok(mut last) = self.last.try_lock() {
            *last = Some((url.clone(), uri.clone()));
        }
        Ok(uri)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).unwrap()
    }

    /// Each URL's `Uri` is its own, whichever was kept before it.
    #[test]
    fn every_url_gets_its_own_uri() {
        let last = LastUri::default();
        let urls = [
            "http://127.0.0.1:8080/v1/messages",
            "http://127.0.0.1:8080/v1/messages",
            "http://127.0.0.1:8080/v1/messages?beta=true",
            "https://api.example.com/v1/chat/completions",
            "http://127.0.0.1:8080/v1/messages",
        ];
        for s in urls {
            let uri = last.of(&url(s)).unwrap();
            assert_eq!(uri.to_string(), s);
        }
    }

    #[test]
    fn its_debug_output_shows_no_url() {
        let last = LastUri::default();
        last.of(&url("https://api.example.com/v1/models?key=secret-123"))
            .unwrap();
        let shown = format!("{last:?}");
        assert!(!shown.contains("secret-123"), "{shown}");
        assert!(!shown.contains("example"), "{shown}");
    }

    #[test]
    fn a_url_http_refuses_is_an_error_and_is_not_kept() {
        let last = LastUri::default();
        // A URL `url` accepts and `http` does not: too long for it.
        let long = format!("http://127.0.0.1/{}", "a".repeat(70_000));
        assert!(last.of(&url(&long)).is_err());
        assert!(last.last.lock().unwrap().is_none());
    }
}
