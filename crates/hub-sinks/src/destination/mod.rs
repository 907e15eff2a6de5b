//! A subscription's destination as the API takes it and the store keeps it: the [`Destination`]
//! enum is the registry's (one variant per sink of the list); `request.rs` reads a request's
//! `sink` object, handing each type to its sink's own parse, and splits it into the public
//! configuration and the credentials.

pub mod request;

pub use crate::registry::Destination;
pub use crate::sink::{Owner, Secrets};
