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
}
