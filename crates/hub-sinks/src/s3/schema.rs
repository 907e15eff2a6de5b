//! What the API takes for this sink: its OpenAPI schema, which the request is read into (the
//! checks serde cannot make are in `config.rs`).

use serde::Deserialize;
use utoipa::ToSchema;

use crate::aws::schema::AwsCredentials;
use crate::fields::Given;

/// An S3 bucket: each event one object,
/// `<prefix><tenant>/<resourcetype>.<eventtype>/<yyyy>/<mm>/<dd>/<ce-id>.json` (the event's
/// day in UTC), the CloudEvent in structured JSON (`application/cloudevents+json`); a repeated
/// delivery overwrites the same object.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "s3", "bucket": "lerian-archive", "prefix": "events/", "region": "us-east-1"}))]
pub struct S3Sink {
    #[schema(min_length = 3, max_length = 63)]
    pub bucket: String,
    /// At most 512 bytes, not beginning with `/`; default empty.
    #[schema(max_length = 512)]
    pub prefix: Option<String>,
    pub region: String,
    #[schema(format = Uri)]
    pub endpoint_url: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<AwsCredentials>)]
    pub credentials: Given<AwsCredentials>,
}
