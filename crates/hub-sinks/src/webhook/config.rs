//! A webhook destination: its configuration, identity and validation.

use std::collections::BTreeMap;

use hub_core::signature::Scheme;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::{Signature, WebhookAuth, WebhookSink};
use crate::fields::{Credentials, Invalid, MAX_URL, SinkConfig, SinkRequest, destination_url, lines, required, text};

/// The default request timeout of a webhook.
pub const DEFAULT_WEBHOOK_TIMEOUT_MS: u64 = 10_000;

fn default_timeout_ms() -> u64 {
    DEFAULT_WEBHOOK_TIMEOUT_MS
}

/// A webhook: a signed `POST` to `url`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookConfig {
    pub url: String,
    /// Static headers sent with every delivery.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// How requests are signed (`lerian`, the default, or `standard-webhooks`).
    #[serde(default)]
    pub signature: Scheme,
    /// How the hub proves itself to the receiver, beside the signature: what of it is not secret
    /// (the secret is sealed with the subscription's credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthConfig>,
    /// TLS beyond the system's trust: a private CA the receiver's certificate chains to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
}

/// A webhook's authentication, without its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AuthConfig {
    /// `Authorization: Basic` with this user name and the sealed `password`.
    Basic { username: String },
    /// A bearer token from the tenant's token endpoint (RFC 6749 §4.4), the client
    /// authenticated with HTTP Basic and the sealed `client_secret`.
    #[serde(rename = "oauth2_client_credentials")]
    OAuth2 {
        token_url: String,
        client_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audience: Option<String>,
    },
    /// A client certificate (public) with its sealed `private_key_pem`.
    Mtls { certificate_pem: String },
}

impl AuthConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Basic { .. } => "basic",
            Self::OAuth2 { .. } => "oauth2_client_credentials",
            Self::Mtls { .. } => "mtls",
        }
    }

    /// The field of `auth` that holds its secret.
    pub fn secret_field(&self) -> &'static str {
        match self {
            Self::Basic { .. } => "password",
            Self::OAuth2 { .. } => "client_secret",
            Self::Mtls { .. } => "private_key_pem",
        }
    }
}

/// A webhook's own TLS trust.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsConfig {
    /// PEM certificates trusted beside the system's roots.
    pub ca_pem: String,
}

impl SinkConfig for WebhookConfig {
    fn key(&self) -> String {
        format!("webhook {}", self.url)
    }

    /// How it is signed and how the hub authenticates count: receivers verify another way.
    fn same_connection(&self, other: &Self) -> bool {
        (&self.url, self.signature, &self.auth, &self.tls) == (&other.url, other.signature, &other.auth, &other.tls)
    }

    /// A password or client certificate goes to the receiver; a client secret to the token
    /// endpoint.
    fn credential_origins(&self) -> Vec<crate::fields::Origin> {
        match &self.auth {
            None => Vec::new(),
            Some(AuthConfig::OAuth2 { token_url, .. }) => vec![crate::fields::origin(Some(token_url))],
            Some(_) => vec![crate::fields::origin(Some(&self.url))],
        }
    }

    fn signature(&self) -> Option<Scheme> {
        Some(self.signature)
    }

    fn credentials_field(&self) -> &'static str {
        match &self.auth {
            Some(AuthConfig::Basic { .. }) => "sink.auth.password",
            Some(AuthConfig::OAuth2 { .. }) => "sink.auth.client_secret",
            Some(AuthConfig::Mtls { .. }) => "sink.auth.private_key_pem",
            None => "sink.auth",
        }
    }
}

const MAX_HEADERS: usize = 20;
/// Words in a header name that say its value is a credential (`X-Api-Key`, `X-Auth-Token`, …).
const CREDENTIAL_WORDS: &[&str] =
    &["token", "secret", "password", "passwd", "api-key", "apikey", "api_key", "auth", "session", "signature"];
/// Headers the hub sets itself, or that would carry credentials in clear configuration.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "user-agent",
    "traceparent",
    "tracestate",
    "authorization",
    "proxy-authorization",
    "cookie",
];

impl SinkRequest for WebhookSink {
    type Config = WebhookConfig;

    fn checked(self, allow_private: bool) -> Result<(WebhookConfig, Credentials), Invalid> {
        let schemes: &[&str] = if allow_private { &["https", "http"] } else { &["https"] };
        let url = destination_url("sink.url", required("sink.url", &self.url, MAX_URL)?, schemes, allow_private)?;
        let headers = self.headers.unwrap_or_default();
        if headers.len() > MAX_HEADERS {
            return Err(Invalid::new("sink.headers", format!("must have at most {MAX_HEADERS} entries")));
        }
        for (name, value) in &headers {
            header(name, value)?;
        }
        let timeout_ms = match self.timeout_ms {
            None => DEFAULT_WEBHOOK_TIMEOUT_MS,
            Some(ms) if (100..=60_000).contains(&ms) => ms,
            Some(_) => return Err(Invalid::new("sink.timeout_ms", "must be a whole number from 100 to 60000")),
        };
        let signature = match self.signature {
            None | Some(Signature::Lerian) => Scheme::Lerian,
            Some(Signature::StandardWebhooks) => Scheme::StandardWebhooks,
            Some(Signature::Ed25519) => Scheme::Ed25519,
        };
        let tls = match self.tls {
            None => None,
            Some(tls) => {
                let pem = lines("sink.tls.ca_pem", &tls.ca_pem, MAX_PEM)?;
                certificates("sink.tls.ca_pem", pem)?;
                if super::http1::tls(Some(pem), None).is_err() {
                    return Err(Invalid::new("sink.tls.ca_pem", "cannot be trusted as a certificate authority"));
                }
                Some(TlsConfig { ca_pem: tls.ca_pem })
            }
        };
        let (auth, credentials) = match self.auth {
            // No authentication: a secret stored for an earlier one goes.
            None => (None, Credentials::Cleared),
            Some(given) => {
                let (auth, secret) = auth(given, schemes, allow_private)?;
                (Some(auth), Credentials::Set(secret))
            }
        };
        Ok((WebhookConfig { url: url.into(), headers, timeout_ms, signature, auth, tls }, credentials))
    }
}

/// A static header: a valid name the hub does not set and that does not say it carries a
/// credential, and a valid value.
fn header(name: &str, value: &str) -> Result<(), Invalid> {
    let f = format!("sink.headers.{name}");
    let lower = name.to_ascii_lowercase();
    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(Invalid::new(&f, "is not a valid header name"));
    }
    if RESERVED_HEADERS.contains(&lower.as_str())
        || lower.starts_with("x-webhook-")
        || lower.starts_with("webhook-")
        || lower.starts_with("x-lerian-")
    {
        return Err(Invalid::new(&f, "is set by the hub or carries credentials; it cannot be configured"));
    }
    // Static headers are configuration, shown in every listing (to portal sessions too): a name
    // that says it carries a credential is refused rather than shown in clear.
    if CREDENTIAL_WORDS.iter().any(|w| lower.contains(w)) {
        return Err(Invalid::new(
            &f,
            "looks like a credential; static header values are shown in every listing, so \
             credentials cannot be configured as headers (receivers verify the signature)",
        ));
    }
    if value.len() > 1024 || reqwest::header::HeaderValue::from_str(value).is_err() {
        return Err(Invalid::new(&f, "must be a valid header value of at most 1024 bytes"));
    }
    Ok(())
}

/// Checks a public PEM field: one or more X.509 certificates and nothing else. A private key
/// pasted beside them (a combined `client.pem`) would be stored in clear and answered on every
/// read, so any other block is refused, and the error never repeats what the field holds.
fn certificates(field: &str, pem: &str) -> Result<(), Invalid> {
    let refuse = |why: &str| Err(Invalid::new(field, why));
    let mut begun = 0usize;
    for line in pem.lines().map(str::trim) {
        if line.starts_with("-----BEGIN") {
            if line != "-----BEGIN CERTIFICATE-----" {
                return refuse(
                    "must hold only PEM certificates: a block other than CERTIFICATE (a private key goes in \
                     sink.auth.private_key_pem, which is kept sealed) is not accepted here",
                );
            }
            begun += 1;
        }
    }
    let mut reader = pem.as_bytes();
    let mut read = 0usize;
    let mut anchors = rustls::RootCertStore::empty();
    loop {
        match rustls::pki_types::pem::from_buf(&mut reader) {
            Ok(None) => break,
            Ok(Some((rustls::pki_types::pem::SectionKind::Certificate, der))) => {
                if anchors.add(rustls::pki_types::CertificateDer::from(der)).is_err() {
                    return refuse("holds a PEM block that is not an X.509 certificate");
                }
                read += 1;
            }
            Ok(Some(_)) => return refuse("must hold only PEM certificates"),
            Err(_) => return refuse("is not readable PEM"),
        }
    }
    if read == 0 || read != begun {
        return refuse("must hold one or more PEM certificates");
    }
    Ok(())
}

/// The longest PEM text taken (a certificate chain or a key).
const MAX_PEM: usize = 16 * 1024;
/// The longest user name, client id, scope or audience.
const MAX_NAME: usize = 1024;
/// The longest password or client secret.
const MAX_SECRET: usize = 4096;

/// Checks `sink.auth`: its public part, and its secret as the credentials to seal.
fn auth(given: WebhookAuth, schemes: &[&str], allow_private: bool) -> Result<(AuthConfig, Value), Invalid> {
    let (auth, field, secret) = match given {
        WebhookAuth::Basic(basic) => {
            let username = required("sink.auth.username", &basic.username, MAX_NAME)?;
            if username.contains(':') {
                return Err(Invalid::new("sink.auth.username", "must not contain ':' (HTTP Basic cannot carry it)"));
            }
            let password = required("sink.auth.password", basic.password.as_deref().unwrap_or_default(), MAX_SECRET)?;
            (AuthConfig::Basic { username: username.to_owned() }, "password", password.to_owned())
        }
        WebhookAuth::Oauth2ClientCredentials(o) => {
            let raw = required("sink.auth.token_url", &o.token_url, MAX_URL)?;
            let token_url = destination_url("sink.auth.token_url", raw, schemes, allow_private)?;
            let optional = |field: &str, value: Option<String>| {
                value.map(|v| text(field, &v, MAX_NAME).map(str::to_owned)).transpose()
            };
            let auth = AuthConfig::OAuth2 {
                token_url: token_url.into(),
                client_id: required("sink.auth.client_id", &o.client_id, MAX_NAME)?.to_owned(),
                scope: optional("sink.auth.scope", o.scope)?,
                audience: optional("sink.auth.audience", o.audience)?,
            };
            let secret = o.client_secret.as_deref().unwrap_or_default();
            (auth, "client_secret", required("sink.auth.client_secret", secret, MAX_SECRET)?.to_owned())
        }
        WebhookAuth::Mtls(m) => {
            let certificate = lines("sink.auth.certificate_pem", &m.certificate_pem, MAX_PEM)?;
            certificates("sink.auth.certificate_pem", certificate)?;
            let key = lines("sink.auth.private_key_pem", m.private_key_pem.as_deref().unwrap_or_default(), MAX_PEM)?;
            if !key.contains("PRIVATE KEY-----") || super::http1::tls(None, Some((certificate, key))).is_err() {
                return Err(Invalid::new(
                    "sink.auth.private_key_pem",
                    "must be the PEM private key (PKCS#8, PKCS#1 or SEC1) of certificate_pem",
                ));
            }
            (AuthConfig::Mtls { certificate_pem: certificate.to_owned() }, "private_key_pem", key.to_owned())
        }
    };
    Ok((auth, serde_json::json!({ field: secret })))
}
