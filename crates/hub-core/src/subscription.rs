//! Subscription vocabulary: sink kinds and verification states.

use std::fmt;

/// Where a subscription's events go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SinkKind {
    Webhook,
    Sqs,
    Rabbitmq,
    Eventbridge,
    Kafka,
    Sns,
    Kinesis,
    S3,
    Pull,
}

impl SinkKind {
    pub const ALL: [SinkKind; 9] = [
        Self::Webhook,
        Self::Sqs,
        Self::Rabbitmq,
        Self::Eventbridge,
        Self::Kafka,
        Self::Sns,
        Self::Kinesis,
        Self::S3,
        Self::Pull,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Webhook => "webhook",
            Self::Sqs => "sqs",
            Self::Rabbitmq => "rabbitmq",
            Self::Eventbridge => "eventbridge",
            Self::Kafka => "kafka",
            Self::Sns => "sns",
            Self::Kinesis => "kinesis",
            Self::S3 => "s3",
            Self::Pull => "pull",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Push sinks get delivery jobs; a pull sink gets entries in its stream.
    pub fn is_push(self) -> bool {
        self != Self::Pull
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
