//! What the AWS destinations share in their validation: region, endpoint and credentials.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::schema::{AwsCredentials, AwsWebIdentity};
use crate::fields::{Credentials, Given, Invalid, MAX_URL, destination_url, required, text};

/// An AWS region's name, as `sink.region`.
pub(crate) fn region(r: &str) -> Result<String, Invalid> {
    let r = required("sink.region", r, 32)?;
    if !r.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        return Err(Invalid::new("sink.region", "must be an AWS region such as us-east-1"));
    }
    Ok(r.to_owned())
}

/// The role an AWS destination's credentials come from: the hub presents its own OIDC token to
/// STS (`AssumeRoleWithWebIdentity`), so no AWS key is stored. Shown by the API as the sink's
/// `credentials`, since nothing in it is secret.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WebIdentity {
    pub role_arn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_name: Option<String>,
}

/// What an AWS destination shows of its credentials: a web identity. Keys are sealed and never
/// shown, so a destination with keys (or none) shows no `credentials`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AwsAccess {
    pub web_identity: WebIdentity,
}

/// An IAM role's ARN: `arn:<partition>:iam::<12-digit account>:role/<path and name>`.
fn role_arn(arn: &str) -> bool {
    let mut parts = arn.splitn(6, ':');
    let fields: Vec<&str> = parts.by_ref().collect();
    let [prefix, partition, service, region, account, resource] = fields[..] else { return false };
    let name = resource.strip_prefix("role/").unwrap_or_default();
    prefix == "arn"
        && partition.starts_with("aws")
        && partition.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
        && service == "iam"
        && region.is_empty()
        && account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && !name.is_empty()
        && !name.ends_with('/')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-/".contains(&b))
}

fn web_identity(w: AwsWebIdentity) -> Result<WebIdentity, Invalid> {
    const ARN: &str = "sink.credentials.web_identity.role_arn";
    const SESSION: &str = "sink.credentials.web_identity.session_name";
    let arn = required(ARN, &w.role_arn, 2048)?;
    if !role_arn(arn) {
        return Err(Invalid::new(ARN, "must be an IAM role ARN such as arn:aws:iam::123456789012:role/streaming-hub"));
    }
    let session = w.session_name.as_deref().map(|s| text(SESSION, s, 64)).transpose()?;
    if let Some(s) = session
        && (s.len() < 2 || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b)))
    {
        return Err(Invalid::new(SESSION, "must be 2 to 64 letters, digits or +=,.@_-"));
    }
    Ok(WebIdentity { role_arn: arn.to_owned(), session_name: session.map(str::to_owned) })
}

/// An AWS sink's `credentials`: static keys (sealed), a web identity (shown, nothing stored
/// sealed), `null` (none) or absent (keep what is stored).
fn aws_credentials(given: Given<AwsCredentials>) -> Result<(Option<AwsAccess>, Credentials), Invalid> {
    match given {
        Given::Omitted => Ok((None, Credentials::Unchanged)),
        Given::Null => Ok((None, Credentials::Cleared)),
        // Keys stored before are dropped: the role replaces them.
        Given::Value(AwsCredentials::WebIdentity(w)) => {
            Ok((Some(AwsAccess { web_identity: web_identity(w.web_identity)? }), Credentials::Cleared))
        }
        Given::Value(AwsCredentials::Keys(keys)) => {
            let id = required("sink.credentials.access_key_id", &keys.access_key_id, 128)?;
            if id.len() < 16 || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(Invalid::new("sink.credentials.access_key_id", "must be an AWS access key id"));
            }
            let secret = required("sink.credentials.secret_access_key", &keys.secret_access_key, 256)?;
            let mut value = json!({"access_key_id": id, "secret_access_key": secret});
            if let Some(token) = &keys.session_token {
                value["session_token"] = json!(text("sink.credentials.session_token", token, 4096)?);
            }
            Ok((None, Credentials::Set(value)))
        }
    }
}

/// A tenant's own `endpoint_url`, when it gives one.
fn endpoint(raw: Option<&str>, allow_private: bool) -> Result<Option<String>, Invalid> {
    let Some(raw) = raw else { return Ok(None) };
    let raw = text("sink.endpoint_url", raw, MAX_URL)?;
    let url = destination_url("sink.endpoint_url", raw, &["https", "http"], allow_private)?;
    if url.scheme() == "http" && !allow_private {
        return Err(Invalid::new("sink.endpoint_url", "must use https"));
    }
    Ok(Some(url.into()))
}

/// Where an AWS destination is and how the hub signs in to it: the three fields every AWS sink
/// has, checked (its credentials, then its region, then its endpoint).
pub(crate) struct Place {
    pub region: String,
    pub endpoint_url: Option<String>,
    /// What is shown of the credentials (a role), if anything.
    pub access: Option<AwsAccess>,
    /// What the request says of the credentials to seal.
    pub credentials: Credentials,
}

/// Checks an AWS sink's `region`, `endpoint_url` and `credentials`.
pub(crate) fn place(
    region: &str,
    endpoint_url: Option<&str>,
    credentials: Given<AwsCredentials>,
    allow_private: bool,
) -> Result<Place, Invalid> {
    let (access, credentials) = aws_credentials(credentials)?;
    Ok(Place {
        region: self::region(region)?,
        endpoint_url: endpoint(endpoint_url, allow_private)?,
        access,
        credentials,
    })
}

/// Every AWS sink's configuration says where it is in the same three fields; each lists itself
/// (`located!(SqsConfig);` in its own `config.rs`), so this base module names no sink.
macro_rules! located {
    ($config:ty) => {
        impl $crate::aws::sink::Located for $config {
            fn region(&self) -> &str {
                &self.region
            }
            fn endpoint_url(&self) -> Option<&str> {
                self.endpoint_url.as_deref()
            }
            fn access(&self) -> Option<&$crate::aws::config::AwsAccess> {
                self.credentials.as_ref()
            }
        }
    };
}
pub(crate) use located;
