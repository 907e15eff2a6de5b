//! Secrets at rest: the key-encryption key and sealing with it.
//!
//! The KEK comes from the variable named by `STREAMING_HUB_KEK_REF`; in `local` mode from
//! `STREAMING_HUB_DEV_KEK`, or — when both are unset — from a key generated once and kept beside
//! the SQLite file (with a warning). Key material is base64 or hex of at least 32 bytes. Without
//! a KEK the hub refuses to create webhook secrets or store credentials: it never falls back to
//! plaintext.

use std::path::PathBuf;

use base64::Engine;
use hub_core::seal::{self, Kek, SealRandom};
use rand::RngCore;

use crate::config::{Config, Database};

/// Why the KEK could not be loaded; names the variable at fault.
#[derive(Debug, thiserror::Error)]
#[error("{variable}: {message}")]
pub struct KekError {
    pub variable: String,
    pub message: String,
}

/// Decodes key material: standard or URL-safe base64 (padding optional) or hex, at least 32 bytes.
pub fn decode_material(raw: &str) -> Result<Vec<u8>, String> {
    let raw = raw.trim();
    let decoded = hex::decode(raw)
        .ok()
        .or_else(|| base64::engine::general_purpose::STANDARD.decode(raw).ok())
        .or_else(|| base64::engine::general_purpose::URL_SAFE.decode(raw).ok())
        .or_else(|| base64::engine::general_purpose::STANDARD_NO_PAD.decode(raw).ok())
        .or_else(|| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(raw).ok())
        .ok_or_else(|| "must be base64 or hex key material".to_owned())?;
    if decoded.len() < 32 {
        return Err(format!("must decode to at least 32 bytes (got {})", decoded.len()));
    }
    Ok(decoded)
}

fn generated_key_path(config: &Config) -> PathBuf {
    match &config.database {
        Database::Sqlite { path } => {
            let mut p = path.clone().into_os_string();
            p.push(".kek");
            PathBuf::from(p)
        }
        Database::Postgres { .. } => PathBuf::from("./streaming-hub.kek"),
    }
}

/// Loads the KEK as configuration says; `Ok(None)` when there is none (outside `local`).
pub fn load_kek(config: &Config) -> Result<Option<Kek>, KekError> {
    let derive = |variable: &str, raw: &str| -> Result<Kek, KekError> {
        let material = decode_material(raw).map_err(|message| KekError { variable: variable.to_owned(), message })?;
        Kek::derive(&material).map_err(|e| KekError { variable: variable.to_owned(), message: e.to_string() })
    };
    if let Some(name) = &config.kek_ref {
        let raw = std::env::var(name).map_err(|_| KekError {
            variable: "STREAMING_HUB_KEK_REF".to_owned(),
            message: format!("names the variable {name}, which is not set"),
        })?;
        return derive(name, &raw).map(Some);
    }
    if !config.env.is_local() {
        if config.dev_kek.is_some() {
            tracing::warn!("STREAMING_HUB_DEV_KEK is only used when STREAMING_HUB_ENV=local; ignored");
        }
        return Ok(None);
    }
    if let Some(dev) = &config.dev_kek {
        return derive("STREAMING_HUB_DEV_KEK", dev.expose()).map(Some);
    }
    let path = generated_key_path(config);
    let variable = "STREAMING_HUB_DEV_KEK".to_owned();
    let raw = match std::fs::read_to_string(&path) {
        Ok(raw) => raw,
        Err(_) => {
            let mut material = [0u8; 32];
            rand::rng().fill_bytes(&mut material);
            let encoded = base64::engine::general_purpose::STANDARD.encode(material);
            write_private(&path, &encoded).map_err(|e| KekError {
                variable: variable.clone(),
                message: format!("unset, and a generated key cannot be kept at {}: {e}", path.display()),
            })?;
            encoded
        }
    };
    tracing::warn!(
        path = %path.display(),
        "no key-encryption key configured; using a generated local key (set STREAMING_HUB_KEK_REF outside local)"
    );
    derive(&variable, &raw).map(Some)
}

fn write_private(path: &std::path::Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)?.write_all(contents.as_bytes())
}

/// Seals and opens secrets with the configured KEK.
#[derive(Debug, Clone)]
pub struct Sealer {
    kek: Option<Kek>,
}

/// What a sealed value protects; part of its binding so values cannot be swapped.
#[derive(Debug, Clone, Copy)]
pub enum Purpose {
    SigningSecret,
    PreviousSecret,
    Credentials,
    /// One of the hub's OIDC signing keys (owned by its kid).
    IssuerKey,
    /// What a running erasure matches (owned by the erasure).
    ErasureMatch,
    /// One of the ledger's signing keys (owned by its kid).
    LedgerKey,
}

impl Purpose {
    fn as_str(self) -> &'static str {
        match self {
            Purpose::SigningSecret => "signing_secret",
            Purpose::PreviousSecret => "previous_secret",
            Purpose::Credentials => "credentials",
            Purpose::IssuerKey => "issuer_key",
            Purpose::ErasureMatch => "erasure_match",
            Purpose::LedgerKey => "ledger_key",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SealerError {
    #[error("no key-encryption key is configured (STREAMING_HUB_KEK_REF)")]
    NoKey,
    #[error("{0}")]
    Seal(#[from] seal::SealError),
}

fn binding(owner: uuid::Uuid, purpose: Purpose) -> Vec<u8> {
    format!("{owner}/{}", purpose.as_str()).into_bytes()
}

impl Sealer {
    pub fn new(kek: Option<Kek>) -> Self {
        Self { kek }
    }

    pub fn available(&self) -> bool {
        self.kek.is_some()
    }

    pub fn seal(&self, owner: uuid::Uuid, purpose: Purpose, plaintext: &[u8]) -> Result<Vec<u8>, SealerError> {
        let kek = self.kek.as_ref().ok_or(SealerError::NoKey)?;
        let mut random = SealRandom { data_key: [0; 32], key_nonce: [0; 12], nonce: [0; 12] };
        let mut rng = rand::rng();
        rng.fill_bytes(&mut random.data_key);
        rng.fill_bytes(&mut random.key_nonce);
        rng.fill_bytes(&mut random.nonce);
        Ok(seal::seal(kek, plaintext, &binding(owner, purpose), &random)?)
    }

    pub fn open(&self, owner: uuid::Uuid, purpose: Purpose, sealed: &[u8]) -> Result<Vec<u8>, SealerError> {
        let kek = self.kek.as_ref().ok_or(SealerError::NoKey)?;
        Ok(seal::open(kek, sealed, &binding(owner, purpose))?)
    }
}

/// A new signing secret for a webhook signed with `scheme`: a `whsk_` key pair's secret key for
/// an asymmetric scheme, else [`new_signing_secret`].
pub fn new_signing_secret_for(scheme: hub_core::signature::Scheme) -> String {
    if scheme.is_asymmetric() {
        let mut seed = [0u8; 32];
        rand::rng().fill_bytes(&mut seed);
        hub_core::signature::asymmetric::secret_key(seed)
    } else {
        new_signing_secret()
    }
}

/// A new webhook signing secret: `whsec_` + 32 random bytes, base64.
pub fn new_signing_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_material_formats() {
        assert_eq!(decode_material(&"ab".repeat(32)).expect("hex").len(), 32);
        let b64 = base64::engine::general_purpose::STANDARD.encode([7u8; 48]);
        assert_eq!(decode_material(&b64).expect("base64").len(), 48);
        assert!(decode_material(&base64::engine::general_purpose::STANDARD.encode([7u8; 31])).is_err());
        assert!(decode_material("not key material!").is_err());
    }

    #[test]
    fn sealing_round_trips_and_needs_a_key() {
        let sealer = Sealer::new(Some(Kek::derive(&[3u8; 32]).expect("kek")));
        let id = uuid::Uuid::now_v7();
        let sealed = sealer.seal(id, Purpose::SigningSecret, b"whsec_x").expect("seal");
        assert_eq!(sealer.open(id, Purpose::SigningSecret, &sealed).expect("open"), b"whsec_x");
        assert!(sealer.open(id, Purpose::Credentials, &sealed).is_err(), "bound to its purpose");
        assert!(matches!(Sealer::new(None).seal(id, Purpose::SigningSecret, b"x"), Err(SealerError::NoKey)));
    }

    #[test]
    fn signing_secrets_look_like_the_spec_says() {
        let s = new_signing_secret();
        assert!(s.starts_with("whsec_"));
        let decoded = base64::engine::general_purpose::STANDARD.decode(&s[6..]).expect("base64");
        assert_eq!(decoded.len(), 32);
        assert_ne!(s, new_signing_secret());
    }
}
