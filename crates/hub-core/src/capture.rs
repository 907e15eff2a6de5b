//! What of a record is kept for operators when it is not accepted (quarantine, the DLQ plane).
//!
//! Only the headers a rule names are kept — never anything else a producer sent alongside (such
//! as credentials) — each value capped and as text, and the body capped. Keys and values are made
//! storable whatever bytes came in: NUL (which PostgreSQL text and JSON cannot hold) becomes
//! U+FFFD, other control characters in a key too, and a key over 256 bytes is dropped.

use std::collections::BTreeMap;

/// How much of a body is kept.
pub const BODY_CAP: usize = 64 * 1024;
/// How much of each header value is kept.
pub const HEADER_CAP: usize = 4096;
/// The longest header name kept.
const KEY_CAP: usize = 256;

/// The CloudEvents and trace headers: what a quarantined record keeps.
pub fn is_event_header(key: &str) -> bool {
    key.starts_with("ce-") || key == "traceparent" || key == "tracestate"
}

/// Captures the headers `keep` accepts (it sees lower-cased keys); the last value of a repeated
/// key wins.
pub fn headers<I, K, V>(headers: I, keep: impl Fn(&str) -> bool) -> BTreeMap<String, String>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<[u8]>,
{
    let mut kept = BTreeMap::new();
    for (key, value) in headers {
        let key = key.as_ref().to_ascii_lowercase();
        if key.len() > KEY_CAP || !keep(&key) {
            continue;
        }
        let key: String = key.chars().map(|c| if c.is_control() { '\u{fffd}' } else { c }).collect();
        let value = value.as_ref();
        let value = &value[..value.len().min(HEADER_CAP)];
        kept.insert(key, String::from_utf8_lossy(value).replace('\0', "\u{fffd}"));
    }
    kept
}

/// The part of a body that is kept.
pub fn body(body: &[u8]) -> &[u8] {
    &body[..body.len().min(BODY_CAP)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_named_headers_are_kept_and_made_storable() {
        let long_value = vec![b'x'; HEADER_CAP + 10];
        let long_key = format!("ce-{}", "k".repeat(KEY_CAP));
        let input: Vec<(&str, &[u8])> = vec![
            ("CE-ID", b"1"),
            ("authorization", b"Bearer secret"),
            ("ce-na\0me", b"v\0alue"),
            ("ce-big", &long_value),
            (&long_key, b"dropped"),
            ("traceparent", b"00-ab"),
            ("ce-id", b"2"),
        ];
        let kept = headers(input, is_event_header);
        assert_eq!(kept.get("ce-id").map(String::as_str), Some("2"), "the last value wins");
        assert!(!kept.contains_key("authorization"), "never what is not named");
        assert_eq!(kept.get("ce-na\u{fffd}me").map(String::as_str), Some("v\u{fffd}alue"));
        assert_eq!(kept["ce-big"].len(), HEADER_CAP);
        assert!(!kept.keys().any(|k| k.len() > KEY_CAP));
        assert!(kept.contains_key("traceparent"));
        assert!(kept.keys().chain(kept.values()).all(|s| !s.contains('\0')));
    }

    proptest::proptest! {
        #[test]
        fn anything_captured_is_storable(
            input in proptest::collection::vec((".{0,40}", proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)), 0..16),
        ) {
            let kept = headers(input.iter().map(|(k, v)| (k.as_str(), v.as_slice())), |_| true);
            proptest::prop_assert!(kept.keys().chain(kept.values()).all(|s| !s.contains('\0')));
            proptest::prop_assert!(kept.keys().all(|k| !k.chars().any(char::is_control)));
        }
    }
}
