//! The API's view of a subscription's `sink`: `hub_sinks::destination::request` validates it,
//! and its errors become the API's `422` naming the field.

pub use hub_sinks::destination::request::{Credentials, Requested as Destination, same_connection};
use serde_json::Value;

use super::error::ApiError;

fn invalid(e: hub_sinks::destination::request::Invalid) -> ApiError {
    ApiError::validation(&e.field, e.problem)
}

/// Parses and validates a `sink` object.
pub fn parse(value: &Value, allow_private: bool) -> Result<Destination, ApiError> {
    hub_sinks::destination::request::parse(value, allow_private).map_err(invalid)
}

/// Stored credentials never follow a destination to another scheme, host or port.
pub fn credentials_follow(stored: &Value, new: &Destination) -> Result<(), ApiError> {
    hub_sinks::destination::request::credentials_follow(stored, new).map_err(invalid)
}
