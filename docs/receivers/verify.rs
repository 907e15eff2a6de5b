//! Verify a Streaming Hub webhook (Rust, with the `hmac`, `sha2` and `subtle` crates).
//!
//! Pass the raw request body (before any parsing), the `X-Webhook-Timestamp` header, every
//! `X-Webhook-Signature` header value (`headers.get_all(..)`; never split a joined string on
//! commas), and every secret you currently accept (two during a rotation).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

pub fn verify(secrets: &[&str], timestamp: &str, body: &[u8], signatures: &[&str], now: i64) -> bool {
    let Ok(ts) = timestamp.parse::<i64>() else { return false };
    if (now - ts).abs() > 300 {
        return false; // older or newer than 5 minutes: refuse (replay protection)
    }
    secrets.iter().any(|secret| {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else { return false };
        mac.update(format!("v1:{ts}.").as_bytes());
        mac.update(body);
        let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        let expected = format!("v1,sha256={hex}");
        signatures.iter().any(|got| bool::from(got.trim().as_bytes().ct_eq(expected.as_bytes())))
    })
}
