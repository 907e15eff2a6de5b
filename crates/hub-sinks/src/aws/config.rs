//! What the SQS and EventBridge destinations share in their validation.

use serde_json::{Value, json};

use crate::fields::{Credentials, Fields, Invalid, MAX_URL, destination_url};

pub(crate) fn region(fields: &Fields<'_>) -> Result<String, Invalid> {
    let r = fields.required("region", 32)?;
    if !r.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        return Err(Invalid::new("sink.region", "must be an AWS region such as us-east-1"));
    }
    Ok(r.to_owned())
}

pub(crate) fn aws_credentials(fields: &Fields<'_>) -> Result<Credentials, Invalid> {
    match fields.map.get("credentials") {
        None => Ok(Credentials::Unchanged),
        Some(Value::Null) => Ok(Credentials::Cleared),
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
            Ok(Credentials::Set(value))
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
