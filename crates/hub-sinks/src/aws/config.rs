//! What the AWS destinations share in their validation: region, endpoint and credentials.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::fields::{Credentials, Fields, Invalid, MAX_URL, destination_url};

pub(crate) fn region(fields: &Fields<'_>) -> Result<String, Invalid> {
    let r = fields.required("region", 32)?;
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

fn web_identity(map: &serde_json::Map<String, Value>) -> Result<WebIdentity, Invalid> {
    let fields = Fields { map };
    let prefixed = |e: Invalid| Invalid { field: e.field.replacen("sink.", "sink.credentials.web_identity.", 1), ..e };
    fields.only(&["role_arn", "session_name"]).map_err(prefixed)?;
    let arn = fields.required("role_arn", 2048).map_err(prefixed)?;
    if !role_arn(arn) {
        return Err(Invalid::new(
            "sink.credentials.web_identity.role_arn",
            "must be an IAM role ARN such as arn:aws:iam::123456789012:role/streaming-hub",
        ));
    }
    let session = fields.string("session_name", 64).map_err(prefixed)?;
    if let Some(s) = session
        && (s.len() < 2 || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b)))
    {
        return Err(Invalid::new(
            "sink.credentials.web_identity.session_name",
            "must be 2 to 64 letters, digits or +=,.@_-",
        ));
    }
    Ok(WebIdentity { role_arn: arn.to_owned(), session_name: session.map(str::to_owned) })
}

/// An AWS sink's `credentials`: static keys (sealed), a web identity (shown, nothing stored
/// sealed), `null` (none) or absent (keep what is stored).
pub(crate) fn aws_credentials(fields: &Fields<'_>) -> Result<(Option<AwsAccess>, Credentials), Invalid> {
    match fields.map.get("credentials") {
        None => Ok((None, Credentials::Unchanged)),
        Some(Value::Null) => Ok((None, Credentials::Cleared)),
        Some(Value::Object(c)) if c.contains_key("web_identity") => {
            if c.len() > 1 {
                return Err(Invalid::new(
                    "sink.credentials",
                    "web_identity stands alone: a destination assumes a role or uses keys, not both",
                ));
            }
            let Value::Object(w) = &c["web_identity"] else {
                return Err(Invalid::new("sink.credentials.web_identity", "must be an object"));
            };
            // Keys stored before are dropped: the role replaces them.
            Ok((Some(AwsAccess { web_identity: web_identity(w)? }), Credentials::Cleared))
        }
        Some(Value::Object(c)) => {
            let inner = Fields { map: c };
            let prefixed = |e: Invalid| Invalid { field: e.field.replacen("sink.", "sink.credentials.", 1), ..e };
            inner.only(&["access_key_id", "secret_access_key", "session_token"]).map_err(prefixed)?;
            let id = inner.required("access_key_id", 128).map_err(prefixed)?;
            if id.len() < 16 || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(Invalid::new("sink.credentials.access_key_id", "must be an AWS access key id"));
            }
            let secret = inner.required("secret_access_key", 256).map_err(prefixed)?;
            let token = inner.string("session_token", 4096).map_err(prefixed)?;
            let mut value = json!({"access_key_id": id, "secret_access_key": secret});
            if let Some(token) = token {
                value["session_token"] = json!(token);
            }
            Ok((None, Credentials::Set(value)))
        }
        Some(_) => Err(Invalid::new("sink.credentials", "must be an object or null")),
    }
}

/// A tenant's own `endpoint_url`, when it gives one.
pub(crate) fn endpoint(fields: &Fields<'_>, allow_private: bool) -> Result<Option<String>, Invalid> {
    let Some(raw) = fields.string("endpoint_url", MAX_URL)? else { return Ok(None) };
    let url = destination_url("endpoint_url", raw, &["https", "http"], allow_private)?;
    if url.scheme() == "http" && !allow_private {
        return Err(Invalid::new("sink.endpoint_url", "must use https"));
    }
    Ok(Some(url.into()))
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
