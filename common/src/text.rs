//! Quoting client input in error messages, bounded: whatever a client sends, the message
//! that echoes it stays small (gRPC status messages travel in a header that C-core and
//! Python clients cap at 16 KiB).

/// `s` cut to at most `max` bytes at a character boundary, with `…` marking the cut; how the
/// agent fits free text to [`MAX_TEXT_BYTES`] and how error messages quote client input.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    const MARK: &str = "…";
    let mut end = max.saturating_sub(MARK.len());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &s[..end])
}

/// How error messages quote a string the client sent: Rust debug quoting, cut to 64 bytes
/// with the original length noted, so a status message stays small whatever the input.
pub fn quote(s: &str) -> String {
    const MAX: usize = 64;
    if s.len() <= MAX {
        format!("{s:?}")
    } else {
        format!("{:?} ({} bytes)", truncate(s, MAX), s.len())
    }
}

/// How error messages quote a list the client sent: the first three items quoted, then
/// "… and N more".
pub fn quote_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    const SHOWN: usize = 3;
    let mut shown = Vec::new();
    let mut more = 0usize;
    for item in items {
        if shown.len() < SHOWN {
            shown.push(quote(item));
        } else {
            more += 1;
        }
    }
    let mut out = shown.join(", ");
    if more > 0 {
        out.push_str(&format!(" … and {more} more"));
    }
    out
}

/// Kubernetes' longest namespace, bytes (a DNS label).
pub const NAMESPACE_MAX: usize = 63;
/// Kubernetes' longest pod name, bytes (a DNS subdomain).
pub const NAME_MAX: usize = 253;

/// Whether `namespace` and `name` fit Kubernetes' limits ([`NAMESPACE_MAX`], [`NAME_MAX`]):
/// what any pod the API server stored has, and what a pod a client describes must have.
pub fn fits_pod_name_limits(namespace: &str, name: &str) -> bool {
    namespace.len() <= NAMESPACE_MAX && name.len() <= NAME_MAX
}

/// How error messages name a pod the client asked for, `namespace/name`: as Kubernetes
/// writes it when both parts fit Kubernetes' own limits (a namespace is at most 63 bytes, a
/// pod name 253) and hold no control characters, so every real pod reads naturally; anything
/// else is [`quote`]d part by part, which keeps the message small whatever the input.
pub fn pod_key(namespace: &str, name: &str) -> String {
    let plain = |s: &str, max: usize| s.len() <= max && !s.chars().any(char::is_control);
    if plain(namespace, NAMESPACE_MAX) && plain(name, NAME_MAX) {
        format!("{namespace}/{name}")
    } else {
        format!("{}/{}", quote(namespace), quote(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_char_boundaries_and_marks_the_cut() {
        assert_eq!(truncate("short", 10), "short");
        let t = truncate(&"é".repeat(100), 11);
        assert!(t.len() <= 11, "{t}");
        assert!(t.ends_with('…'));
        assert_eq!(truncate("abcdef", 4), "a…");
    }

    #[test]
    fn quotes_stay_small() {
        assert_eq!(quote("node-a"), "\"node-a\"");
        let long = "x".repeat(20_000);
        let q = quote(&long);
        assert!(q.len() < 100, "{q}");
        assert!(q.contains("(20000 bytes)"));
        let names: Vec<String> = (0..10_000).map(|i| format!("n{i}")).collect();
        let l = quote_list(names.iter().map(String::as_str));
        assert_eq!(l, "\"n0\", \"n1\", \"n2\" … and 9997 more");
    }

    #[test]
    fn pod_keys_read_naturally_and_stay_small() {
        assert_eq!(pod_key("shop", "web-0"), "shop/web-0");
        let longest = format!("{}/{}", "n".repeat(63), "p".repeat(253));
        assert_eq!(pod_key(&"n".repeat(63), &"p".repeat(253)), longest);
        let huge = "x".repeat(1_000_000);
        for key in [
            pod_key(&huge, "web"),
            pod_key("shop", &huge),
            pod_key(&huge, &huge),
        ] {
            assert!(key.len() < 256, "{} bytes", key.len());
            assert!(key.contains("\"xxxxxxxx"), "{key}");
            assert!(key.contains("(1000000 bytes)"), "{key}");
        }
        assert_eq!(pod_key("shop", "a\nb"), "\"shop\"/\"a\\nb\"");
    }
}
