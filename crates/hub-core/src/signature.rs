//! Webhook signatures (SPEC §3.6).
//!
//! `X-Webhook-Signature: v1,sha256=<hex>` where `hex` is the lowercase HMAC-SHA256, keyed with the
//! secret's UTF-8 bytes exactly as shown to the subscriber (`whsec_` prefix included), of
//! `"v1:" + timestamp + "." + body`.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `X-Webhook-Signature` value for one request.
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).unwrap_or_else(|_| unreachable!());
    mac.update(b"v1:");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("v1,sha256={hex}")
}

/// Checks a received signature in constant time.
pub fn verify(secret: &str, timestamp: i64, body: &[u8], signature: &str) -> bool {
    let Some(hex) = signature.strip_prefix("v1,sha256=") else { return false };
    let Some(bytes) = (0..hex.len())
        .step_by(2)
        .map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect::<Option<Vec<u8>>>()
    else {
        return false;
    };
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).unwrap_or_else(|_| unreachable!());
    mac.update(b"v1:");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&bytes).is_ok()
}

/// How a webhook's requests are signed: the original's scheme (the default) or Standard
/// Webhooks, chosen per subscription (`sink.signature`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Scheme {
    /// `X-Webhook-Timestamp` and `X-Webhook-Signature: v1,sha256=<hex>` (SPEC §3.6).
    #[default]
    #[serde(rename = "lerian")]
    Lerian,
    /// `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64>` of the Standard
    /// Webhooks specification.
    #[serde(rename = "standard-webhooks")]
    StandardWebhooks,
}

impl Scheme {
    pub const ALL: [Scheme; 2] = [Scheme::Lerian, Scheme::StandardWebhooks];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lerian => "lerian",
            Self::StandardWebhooks => "standard-webhooks",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}

/// Standard Webhooks signatures: `v1,<base64>` of HMAC-SHA256 keyed with the base64-decoded part
/// of a `whsec_<base64>` secret, over `"{webhook-id}.{webhook-timestamp}.{body}"`. During a
/// rotation the `webhook-signature` header holds one signature per secret, separated by spaces.
pub mod standard {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    /// The HMAC key of a `whsec_<base64>` secret (the prefix is optional, as the specification's
    /// libraries accept); `None` when the rest is not base64.
    pub fn key(secret: &str) -> Option<Vec<u8>> {
        let raw = secret.strip_prefix("whsec_").unwrap_or(secret);
        STANDARD.decode(raw).ok().filter(|k| !k.is_empty())
    }

    fn mac(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// One `v1,<base64>` signature; `None` when the secret is not a `whsec_<base64>` secret.
    pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
        let digest = mac(&key(secret)?, id, timestamp, body).finalize().into_bytes();
        Some(format!("v1,{}", STANDARD.encode(digest)))
    }

    /// Whether any of the space-separated signatures of a `webhook-signature` header is valid for
    /// `secret`; constant time per comparison.
    pub fn verify(secret: &str, id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
        let Some(key) = key(secret) else { return false };
        header.split(' ').filter_map(|s| s.strip_prefix("v1,")).any(|b64| {
            STANDARD.decode(b64).is_ok_and(|expected| mac(&key, id, timestamp, body).verify_slice(&expected).is_ok())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_test_vector() {
        assert_eq!(
            sign("test-secret", 1_700_000_000, br#"{"id":"123"}"#),
            "v1,sha256=49d0851d6baa34655d12dfba153c748db08b84830d4cb01780d833956c59844c"
        );
    }

    #[test]
    fn verification_accepts_only_the_exact_signature() {
        let sig = sign("whsec_abc", 1_700_000_000, b"{}");
        assert!(verify("whsec_abc", 1_700_000_000, b"{}", &sig));
        assert!(!verify("whsec_abd", 1_700_000_000, b"{}", &sig));
        assert!(!verify("whsec_abc", 1_700_000_001, b"{}", &sig));
        assert!(!verify("whsec_abc", 1_700_000_000, b"{ }", &sig));
        assert!(!verify("whsec_abc", 1_700_000_000, b"{}", "v1,sha256=zz"));
        assert!(!verify("whsec_abc", 1_700_000_000, b"{}", &sig.replace("v1,", "v2,")));
    }

    /// The example of the Standard Webhooks specification's own test suites.
    #[test]
    fn the_standard_webhooks_reference_example() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let sig = standard::sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body).expect("sign");
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let header = format!("v1,bm90IGl0 {sig}");
        assert!(standard::verify(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body, &header));
        assert!(!standard::verify(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_331, body, &header));
        assert!(!standard::verify(secret, "msg_other", 1_614_265_330, body, &header));
        assert!(!standard::verify("whsec_bm90IGl0", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body, &header));
        assert_eq!(standard::sign("whsec_not base64!", "id", 1, b""), None);
    }

    #[test]
    fn schemes_have_their_wire_names() {
        for scheme in Scheme::ALL {
            assert_eq!(Scheme::parse(scheme.as_str()), Some(scheme));
            assert_eq!(serde_json::to_value(scheme).ok(), Some(serde_json::json!(scheme.as_str())));
        }
        assert_eq!(Scheme::default(), Scheme::Lerian);
    }
}
