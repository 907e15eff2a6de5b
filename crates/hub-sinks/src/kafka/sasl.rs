//! The client side of the SASL mechanisms Kafka brokers take: `PLAIN` (RFC 4616) and `SCRAM-SHA-256`
//! / `SCRAM-SHA-512` (RFC 5802, RFC 7677), including the check of the server's signature, so a
//! broker that does not know the password cannot pass for one that does.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

use super::config::Mechanism;

/// The most PBKDF2 iterations a server may ask for: Kafka allows 4 096 to 16 384; a hostile
/// server asking for more would make every connection burn CPU.
const MAX_ITERATIONS: u32 = 16_384;

/// What `PLAIN` sends: no authorization identity, the user, the password.
pub fn plain(username: &str, password: &str) -> Vec<u8> {
    format!("\0{username}\0{password}").into_bytes()
}

/// A SCRAM exchange in progress.
#[derive(Debug)]
pub struct Scram {
    sha512: bool,
    nonce: String,
    first_bare: String,
    /// The server's signature to expect, once the client's final message is built.
    expected: Option<Vec<u8>>,
}

impl Scram {
    /// Starts an exchange; `nonce` is random printable text without commas.
    pub fn new(mechanism: Mechanism, username: &str, nonce: String) -> Self {
        let name = username.replace('=', "=3D").replace(',', "=2C");
        let first_bare = format!("n={name},r={nonce}");
        Self { sha512: mechanism == Mechanism::ScramSha512, nonce, first_bare, expected: None }
    }

    /// The client's first message.
    pub fn first(&self) -> Vec<u8> {
        format!("n,,{}", self.first_bare).into_bytes()
    }

    /// The client's final message, answering the server's first one.
    pub fn last(&mut self, server_first: &[u8], password: &str) -> Result<Vec<u8>, String> {
        let server_first = std::str::from_utf8(server_first).map_err(|_| "the server's SCRAM message is not text")?;
        let attr = |name: &str| {
            server_first.split(',').find_map(|part| part.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
        };
        let nonce = attr("r").ok_or("the server's SCRAM message has no nonce")?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("the server's SCRAM nonce does not extend the client's".into());
        }
        let salt = attr("s").ok_or("the server's SCRAM message has no salt")?;
        let salt = b64_decode(salt).ok_or("the server's SCRAM salt is not base64")?;
        let iterations: u32 =
            attr("i").and_then(|i| i.parse().ok()).ok_or("the server's SCRAM iteration count is not a number")?;
        if !(1..=MAX_ITERATIONS).contains(&iterations) {
            return Err(format!(
                "the server asked for {iterations} SCRAM iterations (at most {MAX_ITERATIONS} are done)"
            ));
        }
        let salted = self.hi(password.as_bytes(), &salt, iterations);
        let client_key = self.hmac(&salted, b"Client Key");
        let stored_key = self.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.first_bare);
        let signature = self.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        let server_key = self.hmac(&salted, b"Server Key");
        self.expected = Some(self.hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", crate::message::b64(&proof)).into_bytes())
    }

    /// Checks the server's final message: its signature proves it knows the password.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(server_final).map_err(|_| "the server's SCRAM message is not text")?;
        if let Some(error) = text.strip_prefix("e=") {
            return Err(format!("the server refused the SCRAM login: {error}"));
        }
        let signature = text.split(',').find_map(|p| p.strip_prefix("v=")).and_then(b64_decode);
        match (&self.expected, signature) {
            (Some(expected), Some(got)) if *expected == got => Ok(()),
            _ => Err("the server's SCRAM signature is wrong: it does not know the password".into()),
        }
    }

    fn hmac(&self, key: &[u8], data: &[u8]) -> Vec<u8> {
        if self.sha512 {
            let mut mac = <Hmac<Sha512> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        } else {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
    }

    fn hash(&self, data: &[u8]) -> Vec<u8> {
        if self.sha512 { Sha512::digest(data).to_vec() } else { Sha256::digest(data).to_vec() }
    }

    /// `Hi()` of RFC 5802: PBKDF2 with the mechanism's HMAC, one block.
    fn hi(&self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut first = salt.to_vec();
        first.extend_from_slice(&1u32.to_be_bytes());
        let mut u = self.hmac(password, &first);
        let mut out = u.clone();
        for _ in 1..iterations {
            u = self.hmac(password, &u);
            out.iter_mut().zip(&u).for_each(|(o, b)| *o ^= b);
        }
        out
    }
}

fn b64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example, end to end.
    #[test]
    fn rfc7677_example() {
        let mut scram = Scram::new(Mechanism::ScramSha256, "user", "rOprNGfwEbeRWgbNEkqO".into());
        assert_eq!(scram.first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let last = scram.last(server_first, "pencil").expect("answers");
        assert_eq!(
            String::from_utf8(last).expect("text"),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(scram.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="), Ok(()));
        assert!(scram.verify(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=").is_err());
        assert!(scram.verify(b"e=invalid-proof").is_err());
    }

    proptest::proptest! {
        /// Whatever a server answers, the exchange refuses it or goes on; it never panics.
        #[test]
        fn any_server_message_is_answered_or_refused(first in ".{0,200}", last in ".{0,200}") {
            let mut scram = Scram::new(Mechanism::ScramSha256, "u", "abc".into());
            let _ = scram.last(first.as_bytes(), "p");
            let _ = scram.verify(last.as_bytes());
        }
    }

    #[test]
    fn hostile_servers_are_refused() {
        let mut scram = Scram::new(Mechanism::ScramSha512, "a,b=c", "abc".into());
        assert_eq!(scram.first(), b"n,,n=a=2Cb=3Dc,r=abc");
        assert!(scram.last(b"r=xyz123,s=AAAA,i=4096", "p").is_err(), "a nonce that is not ours");
        assert!(scram.last(b"r=abc,s=AAAA,i=4096", "p").is_err(), "a nonce the server did not extend");
        assert!(scram.last(b"r=abcdef,s=AAAA,i=100000000", "p").is_err(), "too many iterations");
        assert!(scram.last(b"r=abcdef,s=!!,i=4096", "p").is_err());
        assert!(scram.last(b"r=abcdef,s=AAAA,i=4096", "p").is_ok());
        assert_eq!(plain("u", "p"), b"\0u\0p");
    }
}
