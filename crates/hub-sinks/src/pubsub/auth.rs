//! A service account key and the token it makes: a JWT the key signs itself (RS256), which Google's
//! APIs take as a bearer token for the audience `https://pubsub.googleapis.com/` — no token
//! endpoint is asked. A token is kept and used until ten minutes before it expires.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde_json::{Value, json};

/// The audience of the hub's tokens.
pub const AUDIENCE: &str = "https://pubsub.googleapis.com/";
/// How long a token lasts (Google's maximum).
const LIFETIME: Duration = Duration::from_secs(3600);
/// A token is made again this long before it expires.
const MARGIN: Duration = Duration::from_secs(600);

/// A service account's key, read from the JSON file Google issues.
pub struct ServiceAccount {
    pub client_email: String,
    pub private_key_id: String,
    private_key_pem: String,
    pair: RsaKeyPair,
}

impl std::fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccount").field("client_email", &self.client_email).finish_non_exhaustive()
    }
}

/// The DER inside a PEM block of `label`.
fn pem(text: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let body = text.split(&begin).nth(1)?.split(&end).next()?;
    let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

impl ServiceAccount {
    /// Reads a key given as a JSON object, or as the text of one.
    pub fn read(value: &Value) -> Result<Self, String> {
        let parsed;
        let key = match value {
            Value::Object(_) => value,
            Value::String(text) => {
                parsed = serde_json::from_str::<Value>(text)
                    .map_err(|_| "must be a service account key: the JSON file Google issues".to_owned())?;
                &parsed
            }
            _ => return Err("must be a service account key: the JSON file Google issues".to_owned()),
        };
        if key["type"] != "service_account" {
            return Err("must be a service account key (\"type\": \"service_account\")".to_owned());
        }
        let field = |name: &str| -> Result<String, String> {
            key[name].as_str().filter(|s| !s.is_empty() && s.len() <= 8192).map(str::to_owned).ok_or_else(|| format!("has no {name}"))
        };
        let client_email = field("client_email")?;
        let private_key_id = field("private_key_id")?;
        let private_key_pem = field("private_key")?;
        let der = pem(&private_key_pem, "PRIVATE KEY").ok_or("has a private_key that is not a PKCS#8 PEM key")?;
        let pair = RsaKeyPair::from_pkcs8(&der).map_err(|_| "has a private_key that is not an RSA key Google issues")?;
        Ok(Self { client_email, private_key_id, private_key_pem, pair })
    }

    /// What is sealed: the fields the hub uses, nothing else of the file.
    pub fn stored(&self) -> Value {
        json!({"type": "service_account", "client_email": self.client_email,
               "private_key_id": self.private_key_id, "private_key": self.private_key_pem})
    }

    /// A token for Pub/Sub made at `now` (seconds since the epoch), and when it stops being used.
    pub fn token(&self, now: u64) -> Result<(String, u64), String> {
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let header = json!({"alg": "RS256", "typ": "JWT", "kid": self.private_key_id});
        let exp = now + LIFETIME.as_secs();
        let claims = json!({"iss": self.client_email, "sub": self.client_email, "aud": AUDIENCE, "iat": now, "exp": exp});
        let signing_input = format!("{}.{}", b64(header.to_string().as_bytes()), b64(claims.to_string().as_bytes()));
        let mut signature = vec![0; self.pair.public().modulus_len()];
        self.pair
            .sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), signing_input.as_bytes(), &mut signature)
            .map_err(|_| "the service account key could not sign a token".to_owned())?;
        Ok((format!("{signing_input}.{}", b64(&signature)), exp - MARGIN.as_secs()))
    }
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A service account key of the test's own.
    pub fn key() -> Value {
        hub_testkit::pubsub::service_account_key("lerian-test")
    }

    #[test]
    fn a_key_signs_a_token_its_public_half_verifies() {
        let account = ServiceAccount::read(&key()).expect("a key");
        let (token, renew_at) = account.token(1_000_000).expect("token");
        assert_eq!(renew_at, 1_000_000 + 3600 - 600);
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let decode = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).expect("b64");
        let claims: Value = serde_json::from_slice(&decode(parts[1])).expect("claims");
        assert_eq!(claims["aud"], AUDIENCE);
        assert_eq!(claims["iss"], "hub@lerian-test.iam.gserviceaccount.com");
        assert_eq!(claims["exp"], 1_000_000 + 3600);
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            account.pair.public().as_ref().to_vec(),
        );
        public.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &decode(parts[2])).expect("verifies");
        // Stored, it reads back; as text too.
        let again = ServiceAccount::read(&Value::String(account.stored().to_string())).expect("text");
        assert_eq!(again.client_email, account.client_email);
    }

    #[test]
    fn what_is_not_a_key_is_refused_by_what_is_wrong() {
        let mut k = key();
        k["type"] = json!("authorized_user");
        assert!(ServiceAccount::read(&k).unwrap_err().contains("service_account"));
        let mut k = key();
        k["private_key"] = json!("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
        assert!(ServiceAccount::read(&k).unwrap_err().contains("private_key"));
        for bad in [json!(1), json!("not json"), json!({})] {
            assert!(ServiceAccount::read(&bad).is_err(), "{bad}");
        }
    }
}
