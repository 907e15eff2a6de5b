//! The hub as an OpenID Connect issuer (SPEC §10, "Destination authentication"): ES256 signing
//! keys, their public JWKs, and the short-lived JWTs AWS STS exchanges for a role's credentials
//! (`AssumeRoleWithWebIdentity`).
//!
//! ES256 (ECDSA on P-256 with SHA-256) is one of the algorithms STS accepts (RS256…RS512,
//! ES256…ES512); its keys are small and made without a second crypto library.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

/// The only algorithm the hub signs with.
pub const ALGORITHM: &str = "ES256";

/// The audience of a token meant for AWS STS (what a tenant registers as the provider's client id).
pub const AWS_AUDIENCE: &str = "sts.amazonaws.com";

/// An issuer key that could not be made or read.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(&'static str);

/// One signing key: its id (`kid`) and the P-256 key pair.
pub struct SigningKey {
    kid: String,
    pair: EcdsaKeyPair,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("kid", &self.kid).finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A new key pair as PKCS#8 bytes (what is sealed and stored).
    pub fn generate() -> Result<Vec<u8>, KeyError> {
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
            .map(|doc| doc.as_ref().to_vec())
            .map_err(|_| KeyError("a P-256 key pair could not be generated"))
    }

    /// The key stored under `kid` as PKCS#8 bytes.
    pub fn from_pkcs8(kid: &str, pkcs8: &[u8]) -> Result<Self, KeyError> {
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &SystemRandom::new())
            .map_err(|_| KeyError("the stored issuer key is not a P-256 PKCS#8 key"))?;
        Ok(Self { kid: kid.to_owned(), pair })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JWK (RFC 7517, RFC 7518 §6.2), as JWKS documents list it.
    pub fn jwk(&self) -> Value {
        // An uncompressed P-256 point: 0x04, then 32 bytes of x and 32 of y.
        let point = self.pair.public_key().as_ref();
        json!({
            "kty": "EC",
            "crv": "P-256",
            "alg": ALGORITHM,
            "use": "sig",
            "kid": self.kid,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        })
    }

    /// A compact JWS (RFC 7515) of `claims`, with this key's `kid` in its header.
    pub fn sign(&self, claims: &Value) -> Result<String, KeyError> {
        let header = json!({"alg": ALGORITHM, "typ": "JWT", "kid": self.kid});
        let input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let signature = self
            .pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .map_err(|_| KeyError("the token could not be signed"))?;
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref())))
    }
}

/// The claims of a token the hub presents for one subscription: who it is (`sub`), to whom
/// (`aud`), valid from `now` for `lifetime_secs`.
pub fn claims(issuer: &str, subject: &str, audience: &str, now: i64, lifetime_secs: i64, jti: &str) -> Value {
    json!({
        "iss": issuer,
        "sub": subject,
        "aud": audience,
        "iat": now,
        "nbf": now,
        "exp": now + lifetime_secs,
        "jti": jti,
    })
}

/// The subject of a subscription's tokens: `tenant:<tenant>:subscription:<id>`. A tenant's trust
/// policy conditions on it (`tenant:acme:*`), so no other tenant of the hub can assume its role.
/// `None` for a tenant id holding a `:` (only one stored before the tenant grammar could): its
/// subject could pass for another tenant's (`acme:x` would match `tenant:acme:*`).
pub fn subject(tenant: &str, subscription: uuid::Uuid) -> Option<String> {
    (!tenant.contains(':')).then(|| format!("tenant:{tenant}:subscription:{subscription}"))
}

/// The claims of `token` when its signature verifies with one of the JWKS `keys` (by `kid`);
/// `None` otherwise. Claims are not judged here (what a relying party does after).
pub fn verify(token: &str, keys: &[Value]) -> Option<Value> {
    let mut parts = token.split('.');
    let (header, claims, signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let decode = |s: &str| URL_SAFE_NO_PAD.decode(s).ok();
    let head: Value = serde_json::from_slice(&decode(header)?).ok()?;
    if head["alg"] != ALGORITHM {
        return None;
    }
    let key = keys.iter().find(|k| k["kid"] == head["kid"] && k["kty"] == "EC" && k["crv"] == "P-256")?;
    let mut point = vec![4u8];
    point.extend(decode(key["x"].as_str()?)?);
    point.extend(decode(key["y"].as_str()?)?);
    let message = format!("{header}.{claims}");
    ring::signature::UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &point)
        .verify(message.as_bytes(), &decode(signature)?)
        .ok()?;
    serde_json::from_slice(&decode(claims)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kid: &str) -> SigningKey {
        SigningKey::from_pkcs8(kid, &SigningKey::generate().expect("generate")).expect("read back")
    }

    #[test]
    fn a_token_verifies_with_its_own_jwk_only() {
        let (a, b) = (key("a"), key("b"));
        let claims = claims("https://hub.example", "tenant:t1:subscription:x", AWS_AUDIENCE, 1_700_000_000, 300, "j");
        let token = a.sign(&claims).expect("sign");
        assert_eq!(verify(&token, &[b.jwk(), a.jwk()]), Some(claims.clone()));
        assert_eq!(verify(&token, &[b.jwk()]), None, "no key of that kid");
        // b's key published under a's kid: the signature does not verify.
        let mut forged = b.jwk();
        forged["kid"] = json!("a");
        assert_eq!(verify(&token, &[forged]), None);
        // A claim changed after signing.
        let parts: Vec<&str> = token.split('.').collect();
        let mut other = claims;
        other["sub"] = json!("tenant:t2:subscription:x");
        let tampered = format!("{}.{}.{}", parts[0], URL_SAFE_NO_PAD.encode(other.to_string()), parts[2]);
        assert_eq!(verify(&tampered, &[a.jwk()]), None);
    }

    #[test]
    fn the_jwk_is_a_p256_point_of_two_32_byte_coordinates() {
        let jwk = key("k1").jwk();
        for c in ["x", "y"] {
            assert_eq!(URL_SAFE_NO_PAD.decode(jwk[c].as_str().expect(c)).expect("base64url").len(), 32);
        }
        assert_eq!(
            (jwk["kty"].as_str(), jwk["crv"].as_str(), jwk["alg"].as_str()),
            (Some("EC"), Some("P-256"), Some("ES256"))
        );
    }

    #[test]
    fn no_tenant_id_names_a_subject_that_passes_for_another_tenants() {
        let id = uuid::Uuid::nil();
        assert_eq!(
            subject("acme", id).as_deref(),
            Some("tenant:acme:subscription:00000000-0000-0000-0000-000000000000")
        );
        assert_eq!(subject("acme:x", id), None);
    }

    #[test]
    fn a_stored_key_that_is_not_p256_is_refused() {
        assert!(SigningKey::from_pkcs8("k", b"not a key").is_err());
    }
}
