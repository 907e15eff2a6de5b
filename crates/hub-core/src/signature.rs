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
    /// The Standard Webhooks headers with the asymmetric signature `v1a,<base64>` (ed25519):
    /// receivers verify with the subscription's public key and hold no secret.
    #[serde(rename = "ed25519")]
    Ed25519,
}

impl Scheme {
    pub const ALL: [Scheme; 3] = [Scheme::Lerian, Scheme::StandardWebhooks, Scheme::Ed25519];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lerian => "lerian",
            Self::StandardWebhooks => "standard-webhooks",
            Self::Ed25519 => "ed25519",
        }
    }

    /// Whether it signs with a key pair (the subscription holds a `whsk_` key) rather than a
    /// shared `whsec_` secret.
    pub fn is_asymmetric(self) -> bool {
        self == Self::Ed25519
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

/// Standard Webhooks asymmetric signatures: `v1a,<base64>` of the ed25519 signature, by the
/// subscription's secret key `whsk_<base64 of the 32-byte seed>`, of
/// `"{webhook-id}.{webhook-timestamp}.{body}"`; receivers verify with its public key
/// `whpk_<base64 of the 32-byte key>`. During a rotation the header holds one signature per key,
/// separated by spaces.
pub mod asymmetric {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};

    pub const SECRET_PREFIX: &str = "whsk_";
    pub const PUBLIC_PREFIX: &str = "whpk_";

    /// A secret key from 32 random bytes.
    pub fn secret_key(seed: [u8; 32]) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(seed))
    }

    fn pair(secret: &str) -> Option<Ed25519KeyPair> {
        let seed = STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()?;
        Ed25519KeyPair::from_seed_unchecked(&seed).ok()
    }

    /// The public key of a `whsk_` secret key; `None` when it is not one.
    pub fn public_key(secret: &str) -> Option<String> {
        Some(format!("{PUBLIC_PREFIX}{}", STANDARD.encode(pair(secret)?.public_key().as_ref())))
    }

    fn signed(id: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
        let mut message = Vec::with_capacity(id.len() + body.len() + 24);
        message.extend_from_slice(id.as_bytes());
        message.push(b'.');
        message.extend_from_slice(timestamp.to_string().as_bytes());
        message.push(b'.');
        message.extend_from_slice(body);
        message
    }

    /// One `v1a,<base64>` signature; `None` when `secret` is not a `whsk_` key.
    pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
        let signature = pair(secret)?.sign(&signed(id, timestamp, body));
        Some(format!("v1a,{}", STANDARD.encode(signature.as_ref())))
    }

    /// Whether any of the space-separated signatures of a `webhook-signature` header verifies
    /// with the `whpk_` public key.
    pub fn verify(public: &str, id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
        let Some(key) = public.strip_prefix(PUBLIC_PREFIX).and_then(|k| STANDARD.decode(k).ok()) else {
            return false;
        };
        let message = signed(id, timestamp, body);
        header.split(' ').filter_map(|s| s.strip_prefix("v1a,")).any(|b64| {
            STANDARD.decode(b64).is_ok_and(|sig| UnparsedPublicKey::new(&ED25519, &key).verify(&message, &sig).is_ok())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8032 §7.1, test 1: the seed gives the RFC's public key, and a signature made here
    /// verifies with it and with nothing else.
    #[test]
    fn ed25519_keys_follow_rfc_8032_and_signatures_verify_only_as_made() {
        use base64::Engine;
        let hex = |s: &str| {
            (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect::<Vec<u8>>()
        };
        let seed: [u8; 32] =
            hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60").try_into().unwrap();
        let secret = asymmetric::secret_key(seed);
        let public = asymmetric::public_key(&secret).expect("a key");
        let expected = hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
        assert_eq!(public, format!("whpk_{}", base64::engine::general_purpose::STANDARD.encode(&expected)));
        // The RFC's signature of the empty message, through the same encoding.
        let rfc = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b";
        let key = ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, expected);
        assert!(key.verify(b"", &hex(rfc)).is_ok());

        let sig = asymmetric::sign(&secret, "msg_1", 1_700_000_000, b"{}").expect("signed");
        assert!(sig.starts_with("v1a,"));
        assert!(asymmetric::verify(&public, "msg_1", 1_700_000_000, b"{}", &sig));
        assert!(asymmetric::verify(&public, "msg_1", 1_700_000_000, b"{}", &format!("v1,abc {sig}")), "any of them");
        assert!(!asymmetric::verify(&public, "msg_2", 1_700_000_000, b"{}", &sig));
        assert!(!asymmetric::verify(&public, "msg_1", 1_700_000_001, b"{}", &sig));
        assert!(!asymmetric::verify(&public, "msg_1", 1_700_000_000, b"{ }", &sig));
        assert!(!asymmetric::verify(&sig, "msg_1", 1_700_000_000, b"{}", &sig), "not a public key");
        assert!(asymmetric::sign("whsec_abc", "m", 1, b"").is_none(), "a shared secret is not a key");
        assert!(asymmetric::public_key("whsk_???").is_none());
    }

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
