//! Subscription filters over arbitrary text: a pattern or a refusal, a pattern that prints as it
//! parses, and matching that never panics.
#![no_main]

use hub_core::{EventKey, EventPattern, wants};

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (pattern, rest) = text.split_once('\n').unwrap_or((text, "a.b"));
    let Ok(p) = EventPattern::parse(pattern) else { return };
    assert_eq!(EventPattern::parse(&p.to_string()).ok(), Some(p.clone()), "a pattern prints as it parses");
    if let Ok(key) = EventKey::parse(rest) {
        let matched = p.matches(&key);
        let wanted = wants(std::slice::from_ref(&p), None, &key, "lender");
        // Only the hub's own notices need more than a match (a pattern naming them).
        if key.resource() != hub_core::operational::RESOURCE {
            assert_eq!(wanted, matched, "without an origin, wanting is matching");
        } else {
            assert!(!wanted || matched);
        }
    }
});
