//! The registry, derived from the list of sinks in `lib.rs`: the [`Destination`] enum (one
//! variant per sink, and `pull`), how it is stored and read back, the parse dispatch, the sinks of
//! a process ([`Sinks`], a field per sink, an attempt dispatched from the destination's variant)
//! and the OpenAPI schema of a `sink` ([`SinkSchema`]). Nothing here names a sink: the list does,
//! and each sink's [`TypedSink`] says the rest. The rest of the hub holds the sinks as a `&dyn
//! Sink` (tests put a fake in their place) and never switches on the type.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hub_core::SinkKind;
use hub_core::signature::Scheme;
use serde_json::Value;
use utoipa::openapi::extensions::ExtensionsBuilder;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type};
use utoipa::openapi::{AllOfBuilder, RefOr};
use uuid::Uuid;

use crate::fields::{Credentials, Invalid, Origin, SinkConfig, SinkRequest, read};
use crate::message::{Message, attributes};
use crate::sink::{Failure, Outcome, Probed, Secrets, Settings, TypedSink, misconfigured};

/// The `type` of a pull subscription's sink: the one sink the core knows by name.
pub const PULL: &str = "pull";

/// Delivers to destinations: what the dispatcher and verification hold (as `&dyn Sink`), and
/// what [`Sinks`] is for every destination type at once.
#[async_trait]
pub trait Sink: Send + Sync + std::fmt::Debug {
    /// Makes exactly one delivery attempt; `max_timeout` caps the destination's own timeout (an
    /// attempt must end well inside its lease).
    async fn deliver(
        &self,
        destination: &Destination,
        secrets: &Secrets,
        message: &Message<'_>,
        max_timeout: Duration,
    ) -> Outcome;

    /// Verifies the destination (SPEC §2.2): `Ok` when it acknowledged a test message.
    async fn probe(
        &self,
        destination: &Destination,
        secrets: &Secrets,
        tenant: &str,
        subscription: Uuid,
        max_timeout: Duration,
    ) -> Result<Probed, Failure>;

    /// The headers (or message attributes) a delivery of `message` would carry, before any
    /// signature: what a transform is shown (SPEC §10). By default the CloudEvents attributes.
    fn headers(&self, _destination: &Destination, message: &Message<'_>) -> Vec<(String, String)> {
        attributes(message)
    }
}

/// One attempt through `sink` to a destination of its type.
async fn deliver_with<T: TypedSink>(
    sink: &T,
    config: &T::Config,
    secrets: &Secrets,
    message: &Message<'_>,
    max_timeout: Duration,
) -> Outcome {
    match sink.target(config, secrets, max_timeout) {
        Ok(target) => sink.attempt(&target, message).await,
        Err(failure) => Outcome::Failed(failure),
    }
}

/// The verification of a destination through `sink`.
async fn probe_with<T: TypedSink>(
    sink: &T,
    config: &T::Config,
    secrets: &Secrets,
    tenant: &str,
    subscription: Uuid,
    max_timeout: Duration,
) -> Result<Probed, Failure> {
    let target = sink.target(config, secrets, max_timeout)?;
    sink.check(&target, tenant, subscription).await
}

impl Sinks {
    /// The sinks of a process. `allow_private`: sinks may connect to private addresses; the
    /// rest is how the AWS sinks' clients get their credentials and endpoint (`issuer`: the hub's
    /// OIDC issuer, for destinations that assume a role).
    pub fn new(
        allow_private: bool,
        aws_default_credentials: bool,
        aws_endpoint_url: Option<String>,
        issuer: Option<Arc<dyn crate::sink::TokenIssuer>>,
    ) -> Result<Self, String> {
        Self::with(&Settings { allow_private, default_chain: aws_default_credentials, aws_endpoint_url, issuer })
    }
}

/// Events kept for `GET /v1/subscriptions/{id}/events` behind a durable cursor.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "pull"}))]
pub struct PullSink {}

/// The OpenAPI schema of a `sink` (`Sink`): one schema per sink type, `type` telling them apart.
#[derive(Debug)]
pub struct SinkSchema;

impl utoipa::ToSchema for SinkSchema {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Sink")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        for (_, name, schema, nested, _) in variants() {
            schemas.push((name.into_owned(), schema));
            nested(schemas);
        }
    }
}

impl utoipa::PartialSchema for SinkSchema {
    fn schema() -> RefOr<Schema> {
        let mut one_of = OneOfBuilder::new().description(Some("Where a subscription's events go."));
        for (kind, name, _, _, summary) in variants() {
            let tag = ObjectBuilder::new()
                .property(
                    "type",
                    ObjectBuilder::new().schema_type(SchemaType::new(Type::String)).enum_values(Some([kind])),
                )
                .required("type");
            let summary = (!summary.is_empty()).then(|| ExtensionsBuilder::new().add("x-summary", summary).build());
            one_of = one_of.item(
                AllOfBuilder::new().item(utoipa::openapi::Ref::from_schema_name(name)).item(tag).extensions(summary),
            );
        }
        one_of.into()
    }
}

/// Each sink type's name, schema name, schema, the schemas it refers to, and its one-line
/// summary (`x-summary`, [`TypedSink::SUMMARY`]).
type Variant = (&'static str, Cow<'static, str>, RefOr<Schema>, fn(&mut Vec<(String, RefOr<Schema>)>), &'static str);

/// A sink's schema is one half of an `allOf` whose other half holds `type`: it may not say that
/// properties beside its own are refused (`additionalProperties: false`, which its unknown fields
/// being refused would put there), or `type` itself would be.
fn variant<R: utoipa::ToSchema>(kind: &'static str, summary: &'static str) -> Variant {
    let mut schema = R::schema();
    if let RefOr::T(Schema::Object(object)) = &mut schema {
        object.additional_properties = None;
    }
    (kind, R::name(), schema, R::schemas, summary)
}

/// Defines everything that has one arm per sink, from the list.
macro_rules! registry {
    ($($variant:ident: $module:ident :: $sink:ident),*) => {
        /// Where a subscription's events go: one variant per sink type, and `Pull`.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Destination {
            $($variant(<crate::$module::$sink as TypedSink>::Config),)*
            Pull,
        }

        /// Every sink type's name, and `pull`.
        pub const NAMES: &[&str] = &[$(<crate::$module::$sink as TypedSink>::NAME,)* PULL];

        /// Whether deliveries of a sink type are signed with the subscription's secret.
        pub fn signed(kind: SinkKind) -> bool {
            $(if kind.as_str() == <crate::$module::$sink as TypedSink>::NAME {
                return <crate::$module::$sink as TypedSink>::SIGNED;
            })*
            false
        }

        fn variants() -> Vec<Variant> {
            vec![
                $(variant::<<crate::$module::$sink as TypedSink>::Request>(
                    <crate::$module::$sink as TypedSink>::NAME,
                    <crate::$module::$sink as TypedSink>::SUMMARY,
                ),)*
                variant::<PullSink>(PULL, ""),
            ]
        }

        /// Every sink of a process (each pools its connections), one field per sink type: an
        /// attempt goes from its [`Destination`]'s variant straight to its sink.
        #[derive(Debug)]
        pub struct Sinks {
            $($module: crate::$module::$sink,)*
        }

        impl Sinks {
            /// The sinks of a process made with `settings`.
            pub fn with(settings: &Settings) -> Result<Self, String> {
                Ok(Self { $($module: <crate::$module::$sink as TypedSink>::build(settings)?,)* })
            }
        }

        #[async_trait]
        impl Sink for Sinks {
            async fn deliver(
                &self,
                destination: &Destination,
                secrets: &Secrets,
                message: &Message<'_>,
                max_timeout: Duration,
            ) -> Outcome {
                match destination {
                    $(Destination::$variant(c) => deliver_with(&self.$module, c, secrets, message, max_timeout).await,)*
                    Destination::Pull => Outcome::Failed(misconfigured("a pull subscription has no push destination")),
                }
            }

            /// A pull destination has nothing to verify.
            async fn probe(
                &self,
                destination: &Destination,
                secrets: &Secrets,
                tenant: &str,
                subscription: Uuid,
                max_timeout: Duration,
            ) -> Result<Probed, Failure> {
                match destination {
                    $(Destination::$variant(c) => probe_with(&self.$module, c, secrets, tenant, subscription, max_timeout).await,)*
                    Destination::Pull => Ok(Probed::default()),
                }
            }

            fn headers(&self, destination: &Destination, message: &Message<'_>) -> Vec<(String, String)> {
                match destination {
                    $(Destination::$variant(c) => TypedSink::headers(&self.$module, c, message),)*
                    Destination::Pull => Vec::new(),
                }
            }
        }

        impl Destination {
            /// Reads a destination as the store keeps it.
            pub fn from_stored(value: &Value) -> Result<Self, String> {
                let unreadable = |e: &dyn std::fmt::Display| format!("the stored destination is not readable: {e}");
                let name = value.get("type").and_then(Value::as_str).ok_or_else(|| unreadable(&"it has no type"))?;
                $(if name == <crate::$module::$sink as TypedSink>::NAME {
                    return <<crate::$module::$sink as TypedSink>::Config as serde::Deserialize>::deserialize(value)
                        .map(Self::$variant)
                        .map_err(|e| unreadable(&e));
                })*
                if name == PULL {
                    return Ok(Self::Pull);
                }
                Err(unreadable(&format!("unknown type {name:?}, expected one of {}", NAMES.join(", "))))
            }

            /// The destination as the store keeps it and the API shows it (it holds no secret).
            pub fn to_stored(&self) -> Value {
                let (name, mut value) = match self {
                    $(Self::$variant(c) => (<crate::$module::$sink as TypedSink>::NAME, serde_json::to_value(c).unwrap_or(Value::Null)),)*
                    Self::Pull => (PULL, Value::Object(serde_json::Map::new())),
                };
                if let Value::Object(map) = &mut value {
                    map.insert("type".to_owned(), Value::String(name.to_owned()));
                }
                value
            }

            /// Its sink type's name.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Self::$variant(_) => <crate::$module::$sink as TypedSink>::NAME,)*
                    Self::Pull => PULL,
                }
            }

            /// The configuration of a push destination, as every sink's configuration answers.
            fn config(&self) -> Option<&dyn SinkConfig> {
                match self {
                    $(Self::$variant(c) => Some(c),)*
                    Self::Pull => None,
                }
            }

            /// [`SinkConfig::same_connection`]; destinations of two types never are.
            pub fn same_connection(&self, other: &Destination) -> bool {
                match (self, other) {
                    $((Self::$variant(a), Self::$variant(b)) => a.same_connection(b),)*
                    (Self::Pull, Self::Pull) => true,
                    _ => false,
                }
            }

            /// Reads a request's `sink` object of the type `name` into that sink's request type
            /// and checks it: `None` when no sink has that name.
            pub(crate) fn parse(
                name: &str,
                map: serde_json::Map<String, Value>,
                allow_private: bool,
            ) -> Option<Result<(Self, Credentials), Invalid>> {
                $(if name == <crate::$module::$sink as TypedSink>::NAME {
                    return Some(
                        read::<<crate::$module::$sink as TypedSink>::Request>(map)
                            .and_then(|request| request.checked(allow_private))
                            .map(|(c, k)| (Self::$variant(c), k)),
                    );
                })*
                if name == PULL {
                    return Some(read::<PullSink>(map).map(|PullSink {}| (Self::Pull, Credentials::Unchanged)));
                }
                None
            }
        }
    };
}

with_sinks!(registry);

/// The name of a sink type as a `'static` string (what metrics label with); `"unknown"` for a
/// kind no sink has (a stored row of a sink since removed).
pub fn name(kind: SinkKind) -> &'static str {
    NAMES.iter().copied().find(|n| *n == kind.as_str()).unwrap_or("unknown")
}

/// The names of the push sink types.
pub fn push_names() -> impl Iterator<Item = &'static str> {
    NAMES.iter().copied().filter(|n| *n != PULL)
}

impl Destination {
    /// How a webhook signs (`None` for other sinks).
    pub fn signature(&self) -> Option<Scheme> {
        self.config().and_then(SinkConfig::signature)
    }

    /// The signature scheme of a stored destination (`None` for other sinks or when unreadable).
    pub fn stored_signature(value: &Value) -> Option<Scheme> {
        Self::from_stored(value).ok()?.signature()
    }

    pub fn kind(&self) -> SinkKind {
        SinkKind::named(self.name())
    }

    /// [`SinkConfig::key`]; a pull subscription is its own destination (`subscription`).
    pub fn key(&self, subscription: Uuid) -> String {
        self.config().map_or_else(|| format!("pull {subscription}"), SinkConfig::key)
    }

    /// [`SinkConfig::credentials_field`]; a pull destination has no credentials.
    pub fn credentials_field(&self) -> &'static str {
        self.config().map_or("sink", SinkConfig::credentials_field)
    }

    /// [`SinkConfig::needs_credentials`].
    pub fn needs_credentials(&self) -> Option<&'static str> {
        self.config().and_then(SinkConfig::needs_credentials)
    }

    /// Whether its credentials are tokens the hub signs as an OIDC issuer (an AWS role assumed
    /// with them).
    pub fn uses_hub_tokens(&self) -> bool {
        self.config().is_some_and(SinkConfig::uses_hub_tokens)
    }

    /// [`SinkConfig::credential_origins`].
    pub fn credential_origins(&self) -> Vec<Origin> {
        self.config().map(SinkConfig::credential_origins).unwrap_or_default()
    }
}
