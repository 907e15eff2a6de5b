//! What the API takes for an AWS destination's credentials (its OpenAPI schema).
#![allow(dead_code)]

use serde::Deserialize;
use utoipa::ToSchema;

/// An AWS destination's credentials: keys (sealed at rest and never shown), or a role the
/// hub assumes with its own OIDC token (shown; no key stored). Omit them to use the hub's own.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AwsCredentials {
    Keys(AwsKeys),
    WebIdentity(AwsWebIdentityCredentials),
}

/// Static AWS keys, sealed at rest and never shown.
#[derive(Debug, Deserialize, ToSchema)]
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
#[schema(example = json!({"web_identity": {"role_arn": "arn:aws:iam::123456789012:role/streaming-hub-delivery"}}))]
pub struct AwsWebIdentityCredentials {
    pub web_identity: AwsWebIdentity,
}

/// The role to assume.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AwsWebIdentity {
    /// An IAM role ARN.
    #[schema(example = "arn:aws:iam::123456789012:role/streaming-hub-delivery")]
    pub role_arn: String,
    /// 2 to 64 of letters, digits and `+=,.@_-`; default `streaming-hub-<subscription id>`.
    #[schema(min_length = 2, max_length = 64, pattern = "^[A-Za-z0-9+=,.@_-]+$")]
    pub session_name: Option<String>,
}
