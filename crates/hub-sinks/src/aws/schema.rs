//! What the API takes for an AWS destination's credentials: its OpenAPI schema, which the request
//! is read into.

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::fields::shape;

/// An AWS destination's credentials: keys (sealed at rest and never shown), or a role the
/// hub assumes with its own OIDC token (shown; no key stored). Omit them to use the hub's own.
#[derive(Debug, ToSchema)]
#[serde(untagged)]
pub enum AwsCredentials {
    Keys(AwsKeys),
    WebIdentity(AwsWebIdentityCredentials),
}

/// Told apart by `web_identity`, which stands alone; the fields of either are named in errors.
impl<'de> Deserialize<'de> for AwsCredentials {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        if !map.contains_key("web_identity") {
            return shape(map).map(Self::Keys);
        }
        if map.len() > 1 {
            return Err(serde::de::Error::custom(
                "web_identity stands alone: a destination assumes a role or uses keys, not both",
            ));
        }
        shape(map).map(Self::WebIdentity)
    }
}

/// Static AWS keys, sealed at rest and never shown.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AwsKeys {
    pub access_key_id: String,
    #[schema(write_only)]
    pub secret_access_key: String,
    #[schema(write_only)]
    pub session_token: Option<String>,
}

/// Keyless: the hub signs a short-lived token as an OIDC issuer (`STREAMING_HUB_OIDC_ISSUER`)
/// and calls `AssumeRoleWithWebIdentity` for the role's credentials. The role's trust policy
/// names the hub's issuer, the audience `sts.amazonaws.com` and the subject
/// `tenant:<tenant>:subscription:<id>` (docs/SINKS.md).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"web_identity": {"role_arn": "arn:aws:iam::123456789012:role/streaming-hub-delivery"}}))]
pub struct AwsWebIdentityCredentials {
    pub web_identity: AwsWebIdentity,
}

/// The role to assume.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AwsWebIdentity {
    /// An IAM role ARN.
    #[schema(example = "arn:aws:iam::123456789012:role/streaming-hub-delivery")]
    pub role_arn: String,
    /// 2 to 64 of letters, digits and `+=,.@_-`; default `streaming-hub-<subscription id>`.
    #[schema(min_length = 2, max_length = 64, pattern = "^[A-Za-z0-9+=,.@_-]+$")]
    pub session_name: Option<String>,
}
