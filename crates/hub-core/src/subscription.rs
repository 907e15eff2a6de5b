//! Subscription vocabulary: sink kinds and verification states.

use std::fmt;

/// A subscription's sink type, by its name: all the core decides of it is whether its events are
/// pushed (delivery jobs) or pulled (a stream read with a cursor). The push types are `hub-sinks`'
/// (its one list of sinks); the core names only `pull`. A name is 1 to [`SinkKind::MAX`]
/// lower-case letters, digits and `_`, kept inline so the kind stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SinkKind {
    name: [u8; SinkKind::MAX],
    len: u8,
}

impl SinkKind {
    /// The longest name.
    pub const MAX: usize = 24;
    /// The one kind whose events are pulled.
    pub const PULL: SinkKind = SinkKind::named("pull");

    /// The kind of this name; panics at compile time (or at once) on a name that is not one.
    pub const fn named(name: &str) -> Self {
        match Self::try_named(name) {
            Some(kind) => kind,
            None => panic!("a sink type's name is 1 to 24 of a-z, 0-9 and _"),
        }
    }

    const fn try_named(name: &str) -> Option<Self> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() > Self::MAX {
            return None;
        }
        let mut out = [0u8; Self::MAX];
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if !(b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
                return None;
            }
            out[i] = b;
            i += 1;
        }
        Some(Self { name: out, len: bytes.len() as u8 })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored.
        std::str::from_utf8(&self.name[..self.len as usize]).unwrap_or_default()
    }

    /// A stored name read back (`None` when it cannot be one); whether a push sink of that name
    /// exists is `hub-sinks`' to say.
    pub fn parse(s: &str) -> Option<Self> {
        Self::try_named(s)
    }

    /// Push sinks get delivery jobs; a pull sink gets entries in its stream.
    pub fn is_push(self) -> bool {
        self != Self::PULL
    }
}

impl fmt::Debug for SinkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SinkKind({})", self.as_str())
    }
}

impl fmt::Display for SinkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `pending` → `active`; `failed` after a failed probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VerificationState {
    Pending,
    Active,
    Failed,
}

impl VerificationState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Active => "active",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Active, Self::Failed].into_iter().find(|v| v.as_str() == s)
    }

    /// The state a new subscription starts in: a pull sink has nothing to verify.
    pub fn initial(kind: SinkKind) -> Self {
        if kind.is_push() { Self::Pending } else { Self::Active }
    }
}

impl fmt::Display for VerificationState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a push subscription's deliveries are ordered.
///
/// `key`: events with the same ordering key ([`crate::routing::ordering_key`]) are delivered one at
/// a time in `seq` order — a job is leased only when no earlier job of its key for that
/// subscription is waiting, leased or held, so the next waits until the previous is delivered or
/// dead-lettered; events without a key, and other keys, are not held back. `none`: any order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Ordering {
    #[default]
    None,
    Key,
}

impl Ordering {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Key => "key",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::None, Self::Key].into_iter().find(|o| o.as_str() == s)
    }
}

impl fmt::Display for Ordering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_kind_is_a_short_lower_case_name_and_only_pull_is_pulled() {
        for name in ["webhook", "s3", "pubsub", "a_b_9", "abcdefghijklmnopqrstuvwx"] {
            let kind = SinkKind::parse(name).expect(name);
            assert_eq!(kind.as_str(), name);
            assert!(kind.is_push(), "{name}");
            assert_eq!(kind, SinkKind::named(name));
        }
        for name in ["", "Webhook", "web-hook", "web hook", "é", "abcdefghijklmnopqrstuvwxy", "pull\0"] {
            assert_eq!(SinkKind::parse(name), None, "{name:?}");
        }
        assert!(!SinkKind::PULL.is_push());
        assert_eq!(SinkKind::parse("pull"), Some(SinkKind::PULL));
        assert_eq!(SinkKind::PULL.to_string(), "pull");
    }
}
