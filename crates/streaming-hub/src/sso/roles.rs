//! Roles (SPEC §11, "Single sign-on and roles"): what a person or a key may do in a tenant, and
//! on the platform; how a token's roles claim grants them; and which role each route needs.

use std::collections::BTreeMap;

use axum::http::Method;
use hub_core::TenantId;
use serde_json::Value;

/// What a caller may do in one tenant, each role including the ones below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads.
    Viewer,
    /// Reads, and runs the subscriptions: pause and resume, replay, redrive, verify, test
    /// deliveries, transform and filter tries, simulations, publishing events.
    Operator,
    /// Everything in the tenant: subscriptions, their destinations and secrets, keys.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(raw: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == raw)
    }
}

/// What a caller may do on the platform (`/admin`), and in every tenant it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PlatformRole {
    /// Reads everything: the platform's routes and any tenant's, as a viewer.
    Viewer,
    /// Everything, as the admin token does.
    Admin,
}

impl PlatformRole {
    pub fn as_str(self) -> &'static str {
        match self {
            PlatformRole::Viewer => "platform-viewer",
            PlatformRole::Admin => "platform-admin",
        }
    }

    /// What this platform role may do in a tenant it acts for.
    pub fn in_tenant(self) -> Role {
        match self {
            PlatformRole::Viewer => Role::Viewer,
            PlatformRole::Admin => Role::Admin,
        }
    }
}

/// The roles a token grants: per tenant (the highest named for each), and on the platform.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    pub tenants: BTreeMap<TenantId, Role>,
    pub platform: Option<PlatformRole>,
}

impl Grants {
    /// Reads the roles claim at `path` (dot-separated, e.g. `roles` or `realm_access.roles`) of a
    /// token's claims: a list of strings, or one string of space-separated values, each
    /// `<tenant>:<role>` (`admin`, `operator`, `viewer`), `platform-admin` or `platform-viewer`.
    /// Anything else (a group this hub does not know) is left out, as are tenant ids outside the
    /// tenant grammar.
    pub fn from_claims(claims: &Value, path: &[String]) -> Grants {
        let mut at = claims;
        for part in path {
            match at.get(part) {
                Some(next) => at = next,
                None => return Grants::default(),
            }
        }
        match at {
            Value::Array(items) => Grants::from_values(items.iter().filter_map(Value::as_str)),
            Value::String(text) => Grants::from_values(text.split_whitespace()),
            _ => Grants::default(),
        }
    }

    /// The roles these values grant (a roles claim's items, or [`Grants::values`]).
    pub fn from_values<'a>(values: impl IntoIterator<Item = &'a str>) -> Grants {
        let mut grants = Grants::default();
        for value in values {
            if value == PlatformRole::Admin.as_str() {
                grants.platform = Some(PlatformRole::Admin);
            } else if value == PlatformRole::Viewer.as_str() {
                grants.platform = grants.platform.max(Some(PlatformRole::Viewer));
            } else if let Some((tenant, role)) = value.split_once(':') {
                let (Ok(tenant), Some(role)) = (TenantId::parse(tenant), Role::parse(role)) else {
                    continue;
                };
                let held = grants.tenants.entry(tenant).or_insert(role);
                *held = (*held).max(role);
            }
        }
        grants
    }

    /// The grants as values [`Grants::from_values`] reads back the same (`<tenant>:<role>`, and
    /// the platform role).
    pub fn values(&self) -> Vec<String> {
        let tenants = self.tenants.iter().map(|(tenant, role)| format!("{tenant}:{}", role.as_str()));
        tenants.chain(self.platform.map(|p| p.as_str().to_owned())).collect()
    }

    /// The role held in `tenant`: its own grant, or what a platform role gives there.
    pub fn role_in(&self, tenant: &TenantId) -> Option<Role> {
        let own = self.tenants.get(tenant).copied();
        own.max(self.platform.map(PlatformRole::in_tenant))
    }
}

/// The role a `/v1` route needs of a tenant's caller (the path as requested).
pub fn tenant_route_needs(method: &Method, path: &str) -> Role {
    let sub_action = path.strip_prefix("/v1/subscriptions/").and_then(|rest| rest.split_once('/')).map(|(_, a)| a);
    if method == Method::GET || method == Method::HEAD {
        // Reading a pull stream moves its consumer's cursor: that runs the subscription.
        return if sub_action == Some("events") { Role::Operator } else { Role::Viewer };
    }
    if method == Method::POST && path == "/v1/filters/test" {
        return Role::Viewer;
    }
    if method == Method::POST && (path == "/v1/events" || path == "/v1/transforms/test") {
        return Role::Operator;
    }
    match (method, sub_action) {
        (&Method::POST, Some("replay" | "redrive" | "verify" | "test" | "simulate")) => Role::Operator,
        // A change of `enabled` alone (a pause) needs an operator; the route checks the rest
        // of the body needs an admin (`update_needs`).
        (&Method::PATCH, None) => Role::Operator,
        _ => Role::Admin,
    }
}

/// The role a subscription `PATCH` with these fields needs: `enabled` alone pauses or resumes.
pub fn update_needs(fields: &serde_json::Map<String, Value>) -> Role {
    if fields.keys().all(|k| k == "enabled") { Role::Operator } else { Role::Admin }
}

/// The platform role an `/admin` route needs.
pub fn platform_route_needs(method: &Method) -> PlatformRole {
    if method == Method::GET || method == Method::HEAD { PlatformRole::Viewer } else { PlatformRole::Admin }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn tenant(id: &str) -> TenantId {
        TenantId::parse(id).expect("tenant")
    }

    #[test]
    fn a_roles_claim_grants_the_highest_role_per_tenant_and_ignores_the_rest() {
        let claims = json!({"realm_access": {"roles": [
            "acme:viewer", "acme:admin", "beta:operator", "offline_access", "gamma:owner", "../x:admin", "platform-viewer"
        ]}});
        let grants = Grants::from_claims(&claims, &["realm_access".into(), "roles".into()]);
        assert_eq!(grants.tenants.get(&tenant("acme")), Some(&Role::Admin));
        assert_eq!(grants.tenants.get(&tenant("beta")), Some(&Role::Operator));
        assert_eq!(grants.tenants.len(), 2, "{grants:?}");
        assert_eq!(grants.platform, Some(PlatformRole::Viewer));
        assert_eq!(grants.role_in(&tenant("zeta")), Some(Role::Viewer), "a platform viewer reads any tenant");
        assert_eq!(grants.role_in(&tenant("acme")), Some(Role::Admin));

        let spaced = Grants::from_claims(&json!({"roles": "acme:operator platform-admin"}), &["roles".into()]);
        assert_eq!(spaced.role_in(&tenant("acme")), Some(Role::Admin), "platform-admin is admin everywhere");
        assert_eq!(Grants::from_claims(&json!({"roles": 7}), &["roles".into()]), Grants::default());
        assert_eq!(Grants::from_claims(&json!({}), &["roles".into()]), Grants::default());
    }

    #[test]
    fn each_route_needs_its_role() {
        let cases = [
            (Method::GET, "/v1/subscriptions", Role::Viewer),
            (Method::GET, "/v1/ledger/export", Role::Viewer),
            (Method::GET, "/v1/subscriptions/0196/events", Role::Operator),
            (Method::POST, "/v1/filters/test", Role::Viewer),
            (Method::POST, "/v1/events", Role::Operator),
            (Method::POST, "/v1/transforms/test", Role::Operator),
            (Method::POST, "/v1/subscriptions/0196/replay", Role::Operator),
            (Method::POST, "/v1/subscriptions/0196/redrive", Role::Operator),
            (Method::POST, "/v1/subscriptions/0196/verify", Role::Operator),
            (Method::POST, "/v1/subscriptions/0196/test", Role::Operator),
            (Method::POST, "/v1/subscriptions/0196/simulate", Role::Operator),
            (Method::PATCH, "/v1/subscriptions/0196", Role::Operator),
            (Method::POST, "/v1/subscriptions", Role::Admin),
            (Method::DELETE, "/v1/subscriptions/0196", Role::Admin),
            (Method::POST, "/v1/subscriptions/0196/rotate-secret", Role::Admin),
        ];
        for (method, path, role) in cases {
            assert_eq!(tenant_route_needs(&method, path), role, "{method} {path}");
        }
        let pause = json!({"enabled": false});
        assert_eq!(update_needs(pause.as_object().expect("object")), Role::Operator);
        let more = json!({"enabled": true, "sink": {}});
        assert_eq!(update_needs(more.as_object().expect("object")), Role::Admin);
        assert_eq!(platform_route_needs(&Method::GET), PlatformRole::Viewer);
        assert_eq!(platform_route_needs(&Method::DELETE), PlatformRole::Admin);
    }

    proptest! {
        /// Whatever a roles claim holds, a tenant is granted only what a `<tenant>:<role>` value
        /// names for it (or a platform role gives), never more.
        #[test]
        fn nothing_is_granted_that_no_value_names(values in prop::collection::vec("[a-z:.-]{0,12}", 0..12)) {
            let grants = Grants::from_claims(&json!({"roles": values}), &["roles".into()]);
            for (t, role) in &grants.tenants {
                let named = values.iter().any(|v| v == &format!("{}:{}", t.as_str(), role.as_str()));
                prop_assert!(named, "{t:?} {role:?} from {values:?}");
            }
            let platform = values.iter().any(|v| v == "platform-admin" || v == "platform-viewer");
            prop_assert_eq!(grants.platform.is_some(), platform);
        }

        /// What a console session keeps of a person's grants reads back as the same grants.
        #[test]
        fn grants_kept_as_values_read_back_the_same(values in prop::collection::vec("[a-z.-]{1,6}:(admin|operator|viewer|x)|platform-(admin|viewer)|[a-z:]{0,6}", 0..12)) {
            let grants = Grants::from_values(values.iter().map(String::as_str));
            let kept = grants.values();
            prop_assert_eq!(Grants::from_values(kept.iter().map(String::as_str)), grants);
        }
    }
}
