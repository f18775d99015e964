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
        // A URL runs to the next whitespace. The characters that may close
        // the text around it (`)`, `]`, quotes) may also be the URL's own: an
        // IPv6 host's `]`, a `)` or `'` in a query. Ending the URL at the
        // first of them would print the rest of its query as plain text;
        // only the ones it ends with are taken back from it.
        // Another URL starts another token, space or none between them.
        let end = url_on.find(char::is_whitespace).unwrap_or(url_on.len());
        let end = find_scheme(&url_on[1..end]).map_or(end, |next| next + 1);
        let (token, after) = url_on.split_at(end);
        let url = token.trim_end_matches(CLOSING);
        out.push_str(&redact_url(url));
        out.push_str(&token[url.len()..]);
        rest = after;
    }
    out.push_str(rest);
    out
}

/// What may close the text around a URL, or end a sentence after it.
const CLOSING: [char; 10] = [')', ']', '}', '>', '"', '\'', '.', ',', ';', '!'];

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
            ("two: http://a.test/?k=SECRET and https://b.test?x=SECRET.", "two: http://a.test/?… and https://b.test?…."),
            ("(http://[::1]:8080/p?key=SECRET)", "(http://[::1]:8080/p?…)"),
            ("url (https://g.test/c?tag=(a)&key=SECRET)", "url (https://g.test/c?…)"),
            ("'https://g.test/c?q='a'&key=SECRET'", "'https://g.test/c?…'"),
            ("\"https://u:SECRET@g.test\",\"next\"", "\"https://…@g.test\",\"next\""),
            ("[http://[::1]]", "[http://[::1]]"),
            (
                "(\"http://a.test/v1\",\"https://u:SECRET@b.test/v1?k=SECRET\")",
                "(\"http://a.test/v1\",\"https://…@b.test/v1?…\")",
            ),
            ("'https://a.test','https://u:SECRET@b.test'", "'https://a.test','https://…@b.test'"),
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
