//! Signed checkpoints: a log's size and root at a moment, signed with the hub's ledger key
//! (Ed25519), in a text form anyone can rebuild and check with the published public key.
//!
//! The signed text is four lines, each ending in `\n`:
//!
//! ```text
//! streaming-hub ledger v1
//! tenant acme                      (or: platform)
//! 1234                             (the size: how many entries)
//! <root, standard base64>
//! 2026-12-06T14:00:00.123Z         (when it was signed, UTC, milliseconds)
//! ```

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use chrono::{DateTime, SecondsFormat, Utc};
use ring::rand::SystemRandom;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::Hash;

/// The first line of every signed checkpoint.
pub const HEADER: &str = "streaming-hub ledger v1";

/// The log of one tenant, or the platform's (changes no tenant owns).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Log {
    Tenant(String),
    Platform,
}

impl Log {
    /// How the store names it: the tenant id, or the empty string for the platform (never a
    /// tenant id).
    pub fn key(&self) -> &str {
        match self {
            Log::Tenant(t) => t,
            Log::Platform => "",
        }
    }

    pub fn from_key(key: &str) -> Self {
        if key.is_empty() { Log::Platform } else { Log::Tenant(key.to_owned()) }
    }

    /// Its line in a checkpoint.
    pub fn line(&self) -> String {
        match self {
            Log::Tenant(t) => format!("tenant {t}"),
            Log::Platform => "platform".to_owned(),
        }
    }
}

/// A tree head: what a checkpoint signs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeHead {
    pub log: Log,
    pub size: u64,
    pub root: Hash,
    pub time: DateTime<Utc>,
}

impl TreeHead {
    /// The exact text that is signed.
    pub fn note(&self) -> String {
        format!(
            "{HEADER}\n{}\n{}\n{}\n{}\n",
            self.log.line(),
            self.size,
            STANDARD.encode(self.root),
            self.time.to_rfc3339_opts(SecondsFormat::Millis, true)
        )
    }
}

/// A signed checkpoint as it is stored, served and exported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// How many entries the tree holds.
    pub size: u64,
    /// The tree's root hash, standard base64.
    pub root: String,
    /// When it was signed (RFC 3339, milliseconds).
    pub time: String,
    /// The signing key's id (`kid` in the published keys).
    pub kid: String,
    /// The Ed25519 signature of the note, standard base64.
    pub signature: String,
    /// The signed text itself (what the signature covers).
    pub note: String,
}

/// Why a checkpoint does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint {size}: signed by an unknown key {kid}")]
    UnknownKey { size: u64, kid: String },
    #[error("checkpoint {size}: the signature does not match its text")]
    Signature { size: u64 },
    #[error("checkpoint {size}: its text does not say what its fields say")]
    Note { size: u64 },
    #[error("checkpoint {size}: not a valid checkpoint ({what})")]
    Malformed { size: u64, what: &'static str },
}

/// The key the hub signs checkpoints with.
pub struct LedgerKey {
    kid: String,
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for LedgerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerKey").field("kid", &self.kid).finish_non_exhaustive()
    }
}

/// A key that could not be made or read.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(&'static str);

impl LedgerKey {
    /// A new key as PKCS#8 bytes (what is sealed and stored).
    pub fn generate() -> Result<Vec<u8>, KeyError> {
        Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
            .map(|doc| doc.as_ref().to_vec())
            .map_err(|_| KeyError("an Ed25519 key pair could not be generated"))
    }

    pub fn from_pkcs8(kid: &str, pkcs8: &[u8]) -> Result<Self, KeyError> {
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(pkcs8)
            .map_err(|_| KeyError("the stored ledger key is not an Ed25519 PKCS#8 key"))?;
        Ok(Self { kid: kid.to_owned(), pair })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public half as a JWK (RFC 8037): what `/.well-known/ledger-keys.json` lists.
    pub fn jwk(&self) -> Value {
        public_jwk(&self.kid, self.pair.public_key().as_ref())
    }

    /// Signs a tree head.
    pub fn sign(&self, head: &TreeHead) -> Checkpoint {
        let note = head.note();
        let signature = self.pair.sign(note.as_bytes());
        Checkpoint {
            size: head.size,
            root: STANDARD.encode(head.root),
            time: head.time.to_rfc3339_opts(SecondsFormat::Millis, true),
            kid: self.kid.clone(),
            signature: STANDARD.encode(signature.as_ref()),
            note,
        }
    }
}

/// An Ed25519 public key as a JWK.
pub fn public_jwk(kid: &str, public: &[u8]) -> Value {
    json!({ "kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": kid, "x": URL_SAFE_NO_PAD.encode(public) })
}

/// The raw public key of a JWK the hub published, if it is one.
pub fn jwk_public(jwk: &Value) -> Option<(String, Vec<u8>)> {
    if jwk.get("kty")?.as_str()? != "OKP" || jwk.get("crv")?.as_str()? != "Ed25519" {
        return None;
    }
    let kid = jwk.get("kid")?.as_str()?.to_owned();
    let x = URL_SAFE_NO_PAD.decode(jwk.get("x")?.as_str()?).ok().filter(|x| x.len() == 32)?;
    Some((kid, x))
}

impl Checkpoint {
    /// Checks the signature with one of `keys` (`kid`, raw public key), and that the signed text
    /// is this log's and says what the fields say. Answers the signed root.
    pub fn verify(&self, log: &Log, keys: &[(String, Vec<u8>)]) -> Result<Hash, CheckpointError> {
        let size = self.size;
        let (_, public) = keys
            .iter()
            .find(|(kid, _)| *kid == self.kid)
            .ok_or_else(|| CheckpointError::UnknownKey { size, kid: self.kid.clone() })?;
        let signature =
            STANDARD.decode(&self.signature).map_err(|_| CheckpointError::Malformed { size, what: "signature" })?;
        UnparsedPublicKey::new(&ED25519, public)
            .verify(self.note.as_bytes(), &signature)
            .map_err(|_| CheckpointError::Signature { size })?;
        let root: Hash = STANDARD
            .decode(&self.root)
            .ok()
            .and_then(|r| r.try_into().ok())
            .ok_or(CheckpointError::Malformed { size, what: "root" })?;
        let time = DateTime::parse_from_rfc3339(&self.time)
            .map_err(|_| CheckpointError::Malformed { size, what: "time" })?
            .with_timezone(&Utc);
        if (TreeHead { log: log.clone(), size, root, time }).note() != self.note {
            return Err(CheckpointError::Note { size });
        }
        Ok(root)
    }
}
