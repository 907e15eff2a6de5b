//! Operational events: what the hub itself tells a tenant, as ordinary events in its inbox.
//!
//! Each has the event key `streaming_hub.<kind>` (resource type [`RESOURCE`], source
//! [`SOURCE`]), the subscription it is about as its `ce-subject` and as the extension
//! [`SUBJECT_EXTENSION`], and a JSON body documented per kind (docs/OPERATIONS.md). They reach
//! any subscription whose filter wants them (`streaming_hub.*`) through the ordinary path — except
//! that an event saying a subscription is failing never goes to that subscription
//! ([`excluded`]): it could not take it, and its own failure would otherwise feed itself.
//! Producers cannot send events of this resource type (`envelope::judge` quarantines them), so
//! an event with this key always comes from the hub.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::ids::EventKey;

/// The resource type of every operational event, reserved to the hub.
pub const RESOURCE: &str = "streaming_hub";
/// Their `ce-source`.
pub const SOURCE: &str = "streaming_hub";
/// The extension attribute naming the subscription an operational event is about.
pub const SUBJECT_EXTENSION: &str = "subscriptionid";

/// What an operational event says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    SubscriptionDisabled,
    VerificationFailed,
    VerificationSucceeded,
    JobDeadLettered,
    BreakerOpened,
    BreakerClosed,
    ReplayFinished,
    /// A test event a tenant asked for (`POST /v1/subscriptions/{id}/test`): delivered to the
    /// subscription it names and to no other ([`addressed_to`]).
    Test,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Self::SubscriptionDisabled,
        Self::VerificationFailed,
        Self::VerificationSucceeded,
        Self::JobDeadLettered,
        Self::BreakerOpened,
        Self::BreakerClosed,
        Self::ReplayFinished,
        Self::Test,
    ];

    /// The event type: the second half of the event key.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SubscriptionDisabled => "subscription_disabled",
            Self::VerificationFailed => "verification_failed",
            Self::VerificationSucceeded => "verification_succeeded",
            Self::JobDeadLettered => "job_dead_lettered",
            Self::BreakerOpened => "breaker_opened",
            Self::BreakerClosed => "breaker_closed",
            Self::ReplayFinished => "replay_finished",
            Self::Test => "test",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// It says its subscription is failing.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Self::SubscriptionDisabled | Self::VerificationFailed | Self::JobDeadLettered | Self::BreakerOpened
        )
    }
}

/// Whether an operational event of this key and extensions may not go to `subscription`: it says
/// that very subscription is failing.
pub fn excluded(key: &EventKey, extensions: &BTreeMap<String, String>, subscription: Uuid) -> bool {
    key.resource() == RESOURCE
        && Kind::parse(key.event()).is_some_and(Kind::is_failure)
        && extensions.get(SUBJECT_EXTENSION).and_then(|s| Uuid::parse_str(s).ok()) == Some(subscription)
}

/// Whether this key is that of an event addressed to one subscription (a test event), which no
/// pattern subscribes to.
pub fn is_addressed(key: &EventKey) -> bool {
    key.resource() == RESOURCE && key.event() == Kind::Test.as_str()
}

/// The one subscription an addressed event (a test event) goes to, whatever its patterns and
/// filters; `None` for every other event, which goes where matching sends it.
pub fn addressed_to(key: &EventKey, extensions: &BTreeMap<String, String>) -> Option<Uuid> {
    if !is_addressed(key) {
        return None;
    }
    // Without a valid subscription id it goes nowhere: the nil id is no subscription's.
    Some(extensions.get(SUBJECT_EXTENSION).and_then(|s| Uuid::parse_str(s).ok()).unwrap_or(Uuid::nil()))
}

/// Whether a job of an event with this key may announce its own dead letter: not when the event
/// is itself an operational event, or two failing subscriptions that take `streaming_hub.*`
/// would tell each other about each other's dead letters without end.
pub fn announces_dead_letter(key_resource: &str) -> bool {
    key_resource != RESOURCE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> EventKey {
        EventKey::parse(s).expect("key")
    }

    #[test]
    fn failure_events_skip_their_own_subscription_only() {
        let me = Uuid::now_v7();
        let other = Uuid::now_v7();
        let about_me: BTreeMap<String, String> = [(SUBJECT_EXTENSION.to_owned(), me.to_string())].into();
        for kind in Kind::ALL {
            let k = key(&format!("{RESOURCE}.{}", kind.as_str()));
            assert_eq!(excluded(&k, &about_me, me), kind.is_failure(), "{kind:?}");
            assert!(!excluded(&k, &about_me, other), "{kind:?} goes to every other subscription");
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
        }
        // A test event names its one subscription; nothing else is addressed.
        let test = key(&format!("{RESOURCE}.test"));
        assert_eq!(addressed_to(&test, &about_me), Some(me));
        assert_eq!(addressed_to(&test, &BTreeMap::new()), Some(Uuid::nil()));
        assert_eq!(addressed_to(&key("streaming_hub.breaker_opened"), &about_me), None);
        assert_eq!(addressed_to(&key("account.test"), &about_me), None);
        // The same extension on a producer's event means nothing.
        assert!(!excluded(&key("account.subscription_disabled"), &about_me, me));
        assert!(!excluded(&key("streaming_hub.subscription_disabled"), &BTreeMap::new(), me));
    }

    #[test]
    fn operational_events_never_announce_their_own_dead_letters() {
        assert!(announces_dead_letter("account"));
        assert!(!announces_dead_letter(RESOURCE));
    }
}
