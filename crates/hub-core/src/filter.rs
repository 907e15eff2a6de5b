//! Subscription filters: event-key patterns and the matching rule.
//!
//! A pattern is `<resource>.<event>` where either segment may be `*` (the whole segment, not a
//! prefix). A subscription admits an event only when it is enabled **and** verified active, it
//! belongs to the event's tenant, one of its patterns matches the event key, and its origin (if
//! set) equals the event's source. These are independent conditions; zero matches is normal.
//!
//! One exception keeps events that would otherwise be lost: a subscription that was verified
//! before and is pending verification again (its destination was changed) *holds* the events it
//! would admit — they wait, undelivered, until the new destination is verified ([`Admission`]).

use std::fmt;

use crate::ids::{EventKey, IdError};
use crate::subscription::VerificationState;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Any,
    Exact(String),
}

impl Segment {
    fn parse(s: &str) -> Result<Self, IdError> {
        if s == "*" { Ok(Segment::Any) } else { EventKey::parse_part(s).map(|p| Segment::Exact(p.to_owned())) }
    }

    fn matches(&self, value: &str) -> bool {
        match self {
            Segment::Any => true,
            Segment::Exact(s) => s == value,
        }
    }
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Segment::Any => f.write_str("*"),
            Segment::Exact(s) => f.write_str(s),
        }
    }
}

/// One entry of a subscription's `event_types`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPattern {
    resource: Segment,
    event: Segment,
}

impl EventPattern {
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let (resource, event) = s
            .split_once('.')
            .ok_or(IdError::Grammar { pattern: "<resourcetype>.<eventtype>, * allowed per segment" })?;
        Ok(Self { resource: Segment::parse(resource)?, event: Segment::parse(event)? })
    }

    pub fn matches(&self, key: &EventKey) -> bool {
        self.resource.matches(key.resource()) && self.event.matches(key.event())
    }

    /// The resource type it names; `None` for `*`.
    pub fn resource(&self) -> Option<&str> {
        match &self.resource {
            Segment::Any => None,
            Segment::Exact(s) => Some(s),
        }
    }

    /// The event type it names; `None` for `*`.
    pub fn event(&self) -> Option<&str> {
        match &self.event {
            Segment::Any => None,
            Segment::Exact(s) => Some(s),
        }
    }
}

impl fmt::Display for EventPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.resource, self.event)
    }
}

/// Every pattern that matches `key`, as a subscription stores it (a pattern prints exactly as it
/// was written, so these are the only four `event_types` entries that can want the key): what
/// lets a store find one event's candidate subscriptions by index instead of reading them all.
pub fn patterns_matching(key: &EventKey) -> [String; 4] {
    let (r, e) = (key.resource(), key.event());
    [format!("{r}.{e}"), format!("{r}.*"), format!("*.{e}"), "*.*".to_owned()]
}

/// What matching needs to know of a subscription.
#[derive(Debug, Clone)]
pub struct MatchRule<'a> {
    pub tenant: &'a str,
    pub patterns: &'a [EventPattern],
    pub origin: Option<&'a str>,
    pub enabled: bool,
    pub verification: VerificationState,
    /// It was verified active at least once (so a `pending` state is a re-verification).
    pub verified_before: bool,
}

/// What a subscription makes of a new event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Not for this subscription.
    No,
    /// Deliver it.
    Deliver,
    /// Keep it for this subscription, undelivered until its destination is verified again.
    Hold,
}

/// Whether a subscription's filter wants an event with this key from this source, whatever the
/// subscription's state: one of its patterns matches the key, and its origin (if set) is the
/// source. Matching new events also asks for the state ([`admission`]); a replay asks only this.
///
/// The hub's operational events (resource type `streaming_hub`, see [`crate::operational`]) are
/// wanted only by a pattern that names that resource type: `*.*` means every event a producer
/// sends, not the hub's notices.
///
/// A test event is addressed to one subscription ([`crate::operational::addressed_to`]): no
/// pattern wants it, so neither matching by pattern nor a replay gives it to another.
pub fn wants(patterns: &[EventPattern], origin: Option<&str>, key: &EventKey, source: &str) -> bool {
    if crate::operational::is_addressed(key) {
        return false;
    }
    let operational = key.resource() == crate::operational::RESOURCE;
    origin.is_none_or(|o| o == source)
        && patterns.iter().any(|p| p.matches(key) && (!operational || p.resource().is_some()))
}

/// What a subscription makes of an event of `tenant` with this key from this source.
pub fn admission(rule: &MatchRule<'_>, tenant: &str, key: &EventKey, source: &str) -> Admission {
    let wanted = rule.enabled && rule.tenant == tenant && wants(rule.patterns, rule.origin, key, source);
    match (wanted, rule.verification) {
        (false, _) => Admission::No,
        (true, VerificationState::Active) => Admission::Deliver,
        (true, VerificationState::Pending) if rule.verified_before => Admission::Hold,
        (true, _) => Admission::No,
    }
}

/// Whether a subscription receives an event of `tenant` with this key from this source now.
pub fn admits(rule: &MatchRule<'_>, tenant: &str, key: &EventKey, source: &str) -> bool {
    admission(rule, tenant, key, source) == Admission::Deliver
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> EventKey {
        EventKey::parse(s).expect("key")
    }

    #[test]
    fn operational_events_are_wanted_only_by_name() {
        let ops = key("streaming_hub.subscription_disabled");
        let want = |patterns: &[&str]| {
            let ps: Vec<EventPattern> = patterns.iter().map(|p| EventPattern::parse(p).expect("pattern")).collect();
            wants(&ps, None, &ops, "streaming_hub")
        };
        assert!(!want(&["*.*"]));
        assert!(!want(&["*.subscription_disabled"]));
        assert!(want(&["streaming_hub.*"]));
        assert!(want(&["*.*", "streaming_hub.subscription_disabled"]));
        assert!(!want(&["streaming_hub.breaker_opened"]));
        let test = key("streaming_hub.test");
        let ps: Vec<EventPattern> = ["*.*", "streaming_hub.*", "streaming_hub.test"]
            .iter()
            .map(|p| EventPattern::parse(p).expect("p"))
            .collect();
        assert!(!wants(&ps, None, &test, "streaming_hub"), "a test event is addressed, never subscribed to");
    }

    #[test]
    fn patterns_match_whole_segments() {
        let cases = [
            ("loan_application.approved", "loan_application.approved", true),
            ("loan_application.approved", "loan_application.rejected", false),
            ("loan_application.*", "loan_application.rejected", true),
            ("loan_application.*", "account.created", false),
            ("*.created", "account.created", true),
            ("*.created", "account.deleted", false),
            ("*.*", "anything.goes", true),
            ("loan.approved", "loan_application.approved", false),
        ];
        for (pattern, k, expected) in cases {
            let p = EventPattern::parse(pattern).expect("pattern");
            assert_eq!(p.matches(&key(k)), expected, "{pattern} vs {k}");
            assert_eq!(p.to_string(), pattern);
        }
    }

    #[test]
    fn invalid_patterns_are_refused() {
        for bad in ["", "loan", "loan*.x", "a.b.c", ".x", "x.", "a b.c", "**.x"] {
            assert!(EventPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn admits_requires_every_condition() {
        let patterns = vec![EventPattern::parse("loan_application.*").expect("pattern")];
        let base = MatchRule {
            tenant: "t1",
            patterns: &patterns,
            origin: Some("lender"),
            enabled: true,
            verification: VerificationState::Active,
            verified_before: true,
        };
        let k = key("loan_application.approved");
        assert!(admits(&base, "t1", &k, "lender"));
        let cases: Vec<(&str, MatchRule<'_>, &str, &str, &str)> = vec![
            ("disabled", MatchRule { enabled: false, ..base.clone() }, "t1", "loan_application.approved", "lender"),
            (
                "pending",
                MatchRule { verification: VerificationState::Pending, ..base.clone() },
                "t1",
                "loan_application.approved",
                "lender",
            ),
            (
                "failed",
                MatchRule { verification: VerificationState::Failed, ..base.clone() },
                "t1",
                "loan_application.approved",
                "lender",
            ),
            ("other tenant", base.clone(), "t2", "loan_application.approved", "lender"),
            ("other origin", base.clone(), "t1", "loan_application.approved", "crm"),
            ("other key", base.clone(), "t1", "account.created", "lender"),
            ("no patterns", MatchRule { patterns: &[], ..base.clone() }, "t1", "loan_application.approved", "lender"),
        ];
        for (case, rule, tenant, k, source) in cases {
            assert!(!admits(&rule, tenant, &key(k), source), "{case}");
        }
        let any_origin = MatchRule { origin: None, ..base.clone() };
        assert!(admits(&any_origin, "t1", &k, "crm"), "no origin admits every source");
    }

    #[test]
    fn a_re_verification_holds_what_a_first_verification_does_not() {
        let patterns = vec![EventPattern::parse("*.*").expect("pattern")];
        let rule = |enabled, verification, verified_before| MatchRule {
            tenant: "t1",
            patterns: &patterns,
            origin: None,
            enabled,
            verification,
            verified_before,
        };
        let k = key("loan_application.approved");
        use VerificationState::*;
        let cases = [
            ("active", rule(true, Active, true), Admission::Deliver),
            ("pending again after a change", rule(true, Pending, true), Admission::Hold),
            ("pending, never verified", rule(true, Pending, false), Admission::No),
            ("failed after a change", rule(true, Failed, true), Admission::No),
            ("paused while pending again", rule(false, Pending, true), Admission::No),
            ("paused", rule(false, Active, true), Admission::No),
        ];
        for (case, r, expected) in cases {
            assert_eq!(admission(&r, "t1", &k, "lender"), expected, "{case}");
            assert_eq!(admission(&r, "t2", &k, "lender"), Admission::No, "{case}: another tenant");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]

        /// Any text is a pattern or a refusal; a pattern prints as it parses, and matching any
        /// key never panics.
        #[test]
        fn any_text_is_a_pattern_or_refused(s in "\\PC{0,40}", k in "[a-z_]{1,8}\\.[a-z_]{1,8}") {
            if let Ok(p) = EventPattern::parse(&s) {
                proptest::prop_assert_eq!(EventPattern::parse(&p.to_string()).ok(), Some(p.clone()));
                if let Ok(key) = EventKey::parse(&k) {
                    let _ = p.matches(&key);
                }
            }
        }

        /// A pattern that parses is stored as written and prints as written, and it matches a key
        /// exactly when it is one of the key's four [`patterns_matching`].
        #[test]
        fn a_pattern_matches_exactly_when_it_is_one_of_the_keys_four(
            r in "[a-c*]{1,2}", e in "[a-c*]{1,2}", kr in "[a-c]{1,2}", ke in "[a-c]{1,2}",
        ) {
            let key = EventKey::parse(&format!("{kr}.{ke}")).expect("key");
            let written = format!("{r}.{e}");
            if let Ok(p) = EventPattern::parse(&written) {
                proptest::prop_assert_eq!(p.to_string(), written.clone());
                let named = patterns_matching(&key).contains(&written);
                proptest::prop_assert_eq!(p.matches(&key), named, "{} against {}.{}", written, kr, ke);
            }
        }

        /// A key's own segments, or wildcards in their place, always match it.
        #[test]
        fn a_key_matches_its_own_pattern_and_wildcards(r in "[A-Za-z0-9][A-Za-z0-9_-]{0,11}", e in "[A-Za-z0-9][A-Za-z0-9_-]{0,11}") {
            let key = EventKey::parse(&format!("{r}.{e}")).expect("key");
            for p in [format!("{r}.{e}"), format!("*.{e}"), format!("{r}.*"), "*.*".to_owned()] {
                proptest::prop_assert!(EventPattern::parse(&p).expect("pattern").matches(&key), "{p}");
            }
        }
    }
}
