//! NATS nkeys: an ed25519 key pair written as a base32 "seed" (`SU…` for a user) and a public key
//! (`U…`), each with a CRC-16 (XMODEM) check. The hub logs in by signing the nonce the server sends
//! in its `INFO` with the seed's private key, and names the public key.

use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, KeyPair as _};

/// The first byte of a seed: `S` in the top five bits.
const PREFIX_SEED: u8 = 18 << 3;
/// A user's public key: `U`.
const PREFIX_USER: u8 = 20 << 3;

const CRC: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);
const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// A user's key pair, read from its seed.
pub struct KeyPair {
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair").field("public", &self.public_key()).finish_non_exhaustive()
    }
}

impl KeyPair {
    /// Reads a user's seed (`SU…`): anything else, a damaged one included, is refused.
    pub fn from_seed(seed: &str) -> Result<Self, &'static str> {
        let raw = decode(seed.trim()).ok_or("must be an nkey seed (base32, starting with SU)")?;
        if raw.len() != 2 + 32 + 2 {
            return Err("must be an nkey seed (base32, starting with SU)");
        }
        let (body, sum) = raw.split_at(raw.len() - 2);
        if CRC.checksum(body) != u16::from_le_bytes([sum[0], sum[1]]) {
            return Err("is not a valid nkey seed (its checksum does not match)");
        }
        let kind = ((body[0] & 0b111) << 5) | ((body[1] & 0b1111_1000) >> 3);
        if body[0] & 0b1111_1000 != PREFIX_SEED || kind != PREFIX_USER {
            return Err("must be a user's nkey seed (starting with SU)");
        }
        let pair = Ed25519KeyPair::from_seed_unchecked(&body[2..]).map_err(|_| "is not a valid nkey seed")?;
        Ok(Self { pair })
    }

    /// A new user seed from 32 random bytes (for tests and tools).
    pub fn seed_of(bytes: &[u8; 32]) -> String {
        let mut raw = vec![PREFIX_SEED | (PREFIX_USER >> 5), (PREFIX_USER & 0b1_1111) << 3];
        raw.extend_from_slice(bytes);
        with_checksum(raw)
    }

    /// The public key, `U…`.
    pub fn public_key(&self) -> String {
        let mut raw = vec![PREFIX_USER];
        raw.extend_from_slice(self.pair.public_key().as_ref());
        with_checksum(raw)
    }

    /// The signature of `nonce`, as the server expects it (base64url, no padding).
    pub fn sign(&self, nonce: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.pair.sign(nonce).as_ref())
    }
}

fn with_checksum(mut raw: Vec<u8>) -> String {
    let sum = CRC.checksum(&raw);
    raw.extend_from_slice(&sum.to_le_bytes());
    encode(&raw)
}

/// Base32 (RFC 4648), no padding.
fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(5) * 8);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for &b in bytes {
        buffer = (buffer << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((buffer >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((buffer << (5 - bits)) & 31) as usize]));
    }
    out
}

/// Base32 (RFC 4648) without padding; `None` on a character outside the alphabet.
fn decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 5 / 8);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let value = ALPHABET.iter().position(|&a| a == c)? as u32;
        buffer = (buffer << 5) | value;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_seed_names_its_public_key_and_signs_what_the_key_verifies() {
        let seed = KeyPair::seed_of(&[7; 32]);
        assert!(seed.starts_with("SU"), "{seed}");
        let pair = KeyPair::from_seed(&seed).expect("a seed");
        let public = pair.public_key();
        assert!(public.starts_with('U') && public.len() == 56, "{public}");
        let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(pair.sign(b"nonce")).expect("b64");
        let raw = decode(&public).expect("base32");
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &raw[1..33])
            .verify(b"nonce", &signature)
            .expect("the public key verifies the signature");
    }

    #[test]
    fn damaged_or_foreign_seeds_are_refused() {
        let seed = KeyPair::seed_of(&[9; 32]);
        let mut damaged = seed.clone().into_bytes();
        damaged[10] = if damaged[10] == b'A' { b'B' } else { b'A' };
        for bad in [String::from_utf8(damaged).unwrap(), seed[..20].to_owned(), "SU!!".into(), String::new()] {
            assert!(KeyPair::from_seed(&bad).is_err(), "{bad}");
        }
        // An account's seed (SA…) is not a user's.
        let mut raw = vec![PREFIX_SEED, 0];
        raw.extend_from_slice(&[1; 32]);
        assert!(KeyPair::from_seed(&with_checksum(raw)).is_err());
    }

    proptest! {
        #[test]
        fn base32_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(decode(&encode(&bytes)).expect("decodes"), bytes);
        }

        #[test]
        fn any_text_is_a_seed_or_refused_never_a_panic(text in ".{0,80}") {
            let _ = KeyPair::from_seed(&text);
        }
    }
}
