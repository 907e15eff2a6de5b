//! Envelope encryption of secrets at rest (AES-256-GCM).
//!
//! Each secret gets its own random data key; the data key is encrypted ("wrapped") with the
//! key-encryption key (KEK) from configuration, and both ciphertexts are stored together. The
//! caller binds each sealed value to where it is stored (`aad`, e.g. a subscription id and a
//! purpose) so a ciphertext moved to another row fails to open. Randomness is an input, as
//! everywhere in this crate.
//!
//! Layout: `"SH1" | kek id (8) | key nonce (12) | wrapped key (32 + 16) | nonce (12) | ciphertext`.

use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{Aead, Payload};
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

const MAGIC: &[u8; 3] = b"SH1";
const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const ID_LEN: usize = 8;
const HEADER_LEN: usize = MAGIC.len() + ID_LEN + NONCE_LEN + KEY_LEN + TAG_LEN + NONCE_LEN;

/// Why a value could not be sealed or opened. Never carries key material or plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("the key-encryption key must be at least 32 bytes (got {0})")]
    ShortKey(usize),
    #[error("the stored value was sealed with another key-encryption key")]
    WrongKey,
    #[error("the stored value is not a sealed secret")]
    Malformed,
    #[error("the stored value failed authentication (tampered, or bound to another record)")]
    Tampered,
}

/// The key-encryption key. Its `Debug` output shows only its id.
#[derive(Clone)]
pub struct Kek {
    key: [u8; KEY_LEN],
    id: [u8; ID_LEN],
}

impl std::fmt::Debug for Kek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kek({})", self.id_hex())
    }
}

impl Kek {
    /// Derives the AES key from configured key material of at least 32 bytes.
    pub fn derive(material: &[u8]) -> Result<Self, SealError> {
        if material.len() < KEY_LEN {
            return Err(SealError::ShortKey(material.len()));
        }
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(material).map_err(|_| SealError::ShortKey(0))?;
        mac.update(b"streaming-hub/kek/v1");
        let key: [u8; KEY_LEN] = mac.finalize().into_bytes().into();
        let digest = Sha256::digest(key);
        let mut id = [0u8; ID_LEN];
        id.copy_from_slice(&digest[..ID_LEN]);
        Ok(Self { key, id })
    }

    /// A short public fingerprint telling keys apart (shown in logs, never the key).
    pub fn id_hex(&self) -> String {
        self.id.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new((&self.key).into())
    }
}

/// The random inputs of one sealing: a fresh data key and two fresh nonces.
#[derive(Debug, Clone)]
pub struct SealRandom {
    pub data_key: [u8; KEY_LEN],
    pub key_nonce: [u8; NONCE_LEN],
    pub nonce: [u8; NONCE_LEN],
}

/// Encrypts `plaintext` under a fresh data key wrapped by `kek`, bound to `aad`.
pub fn seal(kek: &Kek, plaintext: &[u8], aad: &[u8], random: &SealRandom) -> Result<Vec<u8>, SealError> {
    let wrapped = kek
        .cipher()
        .encrypt(&Nonce::<U12>::from(random.key_nonce), Payload { msg: &random.data_key, aad: &kek.id })
        .map_err(|_| SealError::Malformed)?;
    let data_cipher = Aes256Gcm::new((&random.data_key).into());
    let ciphertext = data_cipher
        .encrypt(&Nonce::<U12>::from(random.nonce), Payload { msg: plaintext, aad })
        .map_err(|_| SealError::Malformed)?;
    let mut out = Vec::with_capacity(HEADER_LEN + ciphertext.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&kek.id);
    out.extend_from_slice(&random.key_nonce);
    out.extend_from_slice(&wrapped);
    out.extend_from_slice(&random.nonce);
    out.extend_from_slice(&ciphertext);
    Ok(out)
}

fn nonce_of(bytes: &[u8]) -> Result<Nonce<U12>, SealError> {
    let array: [u8; NONCE_LEN] = bytes.try_into().map_err(|_| SealError::Malformed)?;
    Ok(Nonce::<U12>::from(array))
}

/// Decrypts a value sealed by [`seal`] with the same key and `aad`.
pub fn open(kek: &Kek, sealed: &[u8], aad: &[u8]) -> Result<Vec<u8>, SealError> {
    if sealed.len() < HEADER_LEN + TAG_LEN || &sealed[..MAGIC.len()] != MAGIC {
        return Err(SealError::Malformed);
    }
    let (id, rest) = sealed[MAGIC.len()..].split_at(ID_LEN);
    if id != kek.id {
        return Err(SealError::WrongKey);
    }
    let (key_nonce, rest) = rest.split_at(NONCE_LEN);
    let (wrapped, rest) = rest.split_at(KEY_LEN + TAG_LEN);
    let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
    let data_key = kek
        .cipher()
        .decrypt(&nonce_of(key_nonce)?, Payload { msg: wrapped, aad: &kek.id })
        .map_err(|_| SealError::Tampered)?;
    if data_key.len() != KEY_LEN {
        return Err(SealError::Malformed);
    }
    Aes256Gcm::new_from_slice(&data_key)
        .map_err(|_| SealError::Malformed)?
        .decrypt(&nonce_of(nonce)?, Payload { msg: ciphertext, aad })
        .map_err(|_| SealError::Tampered)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: u8) -> SealRandom {
        SealRandom { data_key: [n; 32], key_nonce: [n.wrapping_add(1); 12], nonce: [n.wrapping_add(2); 12] }
    }

    #[test]
    fn sealed_values_open_only_with_their_key_and_binding() {
        let kek = Kek::derive(&[7u8; 32]).expect("kek");
        let sealed = seal(&kek, b"whsec_secret", b"sub-1/signing", &random(1)).expect("seal");
        assert!(!sealed.windows(12).any(|w| w == b"whsec_secret"), "no plaintext in the sealed bytes");
        assert_eq!(open(&kek, &sealed, b"sub-1/signing").expect("open"), b"whsec_secret");

        assert_eq!(open(&kek, &sealed, b"sub-2/signing"), Err(SealError::Tampered), "bound to its record");
        let other = Kek::derive(&[8u8; 32]).expect("kek");
        assert_eq!(open(&other, &sealed, b"sub-1/signing"), Err(SealError::WrongKey));
        let mut flipped = sealed.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(open(&kek, &flipped, b"sub-1/signing"), Err(SealError::Tampered));
        assert_eq!(open(&kek, b"plain", b""), Err(SealError::Malformed));
    }

    #[test]
    fn short_keys_are_refused_and_debug_hides_the_key() {
        assert_eq!(Kek::derive(&[1u8; 31]).map(|_| ()), Err(SealError::ShortKey(31)));
        let kek = Kek::derive(&[1u8; 64]).expect("kek");
        let shown = format!("{kek:?}");
        assert!(shown.starts_with("Kek(") && shown.len() == 4 + 16 + 1, "{shown}");
    }
}
