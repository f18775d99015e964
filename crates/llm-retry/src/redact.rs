//! Error texts as hooks and logs may see them: with no URL query string or
//! userinfo, where clients put API keys (`?key=…`, `https://user:key@…`).

/// `text` with every `http://` / `https://` URL's userinfo and query
/// string replaced by `…`.
pub(crate) fn error_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = find_scheme(rest) {
        let (before, url_on) = rest.split_at(at);
        out.push_str(before);
        let end = url_on
            .find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>' | ']'))
            .unwrap_or(url_on.len());
        let (url, after) = url_on.split_at(end);
        out.push_str(&redact_url(url));
        rest = after;
    }
    out.push_str(rest);
    out
}

fn find_scheme(text: &str) -> Option<usize> {
    let http = text.find("http://");
    let https = text.find("https://");
    match (http, https) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn redact_url(url: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let (scheme, rest) = url.split_at(scheme_end);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = match authority.rfind('@') {
        Some(at) => format!("…@{}", &authority[at + 1..]),
        None => authority.to_owned(),
    };
    let path = match path.find(['?', '#']) {
        Some(q) => format!("{}?…", &path[..q]),
        None => path.to_owned(),
    };
    format!("{scheme}{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_in_urls_never_reach_the_text() {
        let cases = [
            (
                "error sending request for url (https://api.test/v1/models/m:generate?key=SECRET&alt=sse)",
                "error sending request for url (https://api.test/v1/models/m:generate?…)",
            ),
            (
                "connect to http://user:SECRET@proxy.test:8080/ failed",
                "connect to http://…@proxy.test:8080/ failed",
            ),
            ("https://a.test/p#SECRET", "https://a.test/p?…"),
            ("no url here", "no url here"),
            ("two: http://a.test/?k=SECRET and https://b.test?x=SECRET.", "two: http://a.test/?… and https://b.test?…"),
            ("http://", "http://"),
            ("é https://ü.test/é?k=SECRET é", "é https://ü.test/é?… é"),
        ];
        for (text, want) in cases {
            let got = error_text(text);
            assert_eq!(got, want);
            assert!(!got.contains("SECRET"), "{got}");
        }
    }
}
