//! The API's view of a subscription's `sink`: `hub_sinks::destination::request` validates it,
//! and its errors become the API's `422` naming the field.

pub use hub_sinks::destination::request::{Credentials, Requested as Destination, same_connection};
use serde_json::Value;

use super::error::ApiError;

fn invalid(e: hub_sinks::destination::request::Invalid) -> ApiError {
    ApiError::validation(&e.field, e.problem)
}

/// Parses and validates a `sink` object: a role assumed with the hub's token needs the hub to
/// be an OIDC issuer.
pub fn parse(value: &Value, state: &super::AppState) -> Result<Destination, ApiError> {
    let dest = hub_sinks::destination::request::parse(value, state.settings.allow_private_sinks).map_err(invalid)?;
    if dest.typed.uses_hub_tokens() && state.access.issuer.is_none() {
        return Err(ApiError::validation(
            "sink.credentials.web_identity",
            "this hub is not an OIDC issuer (STREAMING_HUB_OIDC_ISSUER): give keys, or ask the operator to make it one",
        ));
    }
    Ok(dest)
}

/// A destination that cannot be reached without credentials has them (`stored`: the
/// subscription keeps credentials this request leaves unchanged).
pub fn credentials_present(new: &Destination, stored: bool) -> Result<(), ApiError> {
    hub_sinks::destination::request::credentials_present(new, stored).map_err(invalid)
}

/// Stored credentials never follow a destination to another scheme, host or port.
pub fn credentials_follow(stored: &Value, new: &Destination) -> Result<(), ApiError> {
    hub_sinks::destination::request::credentials_follow(stored, new).map_err(invalid)
}
