//! The shapes of settings' values (durations, sizes, URLs, lists) and how a value is shown in a
//! problem: read by `Config`, each refusing with a message that says what was expected.

use std::time::Duration;

/// How a value (or a name) is shown in a problem: at most a short prefix, with its length when
/// cut, so a problem is one short line whatever was set.
pub fn quoted(raw: &str) -> String {
    const SHOWN: usize = 40;
    let mut chars = raw.chars();
    let prefix: String = chars.by_ref().take(SHOWN).collect();
    if chars.next().is_none() { format!("{prefix:?}") } else { format!("{prefix:?}… ({} bytes)", raw.len()) }
}

/// `250ms`, `30s`, `5m`, `2h`, `7d`, or combinations such as `1h30m`.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    humantime::parse_duration(raw)
        .map_err(|_| format!("must be a duration such as 30s, 5m or 2h (got {})", quoted(raw)))
}

/// A memory size: bytes, or a number with `KiB`, `MiB` or `GiB`, from 1 MiB to 1 GiB.
pub(super) fn memory_size(raw: &str) -> Result<usize, String> {
    let bad = || format!("must be a size from 1MiB to 1GiB, such as 16MiB (got {})", quoted(raw));
    let raw_t = raw.trim();
    let (number, unit) = raw_t.find(|c: char| !c.is_ascii_digit()).map_or((raw_t, ""), |i| raw_t.split_at(i));
    let n: usize = number.parse().map_err(|_| bad())?;
    let bytes = match unit.trim() {
        "" | "B" => Some(n),
        "KiB" => n.checked_mul(1 << 10),
        "MiB" => n.checked_mul(1 << 20),
        "GiB" => n.checked_mul(1 << 30),
        _ => None,
    }
    .ok_or_else(bad)?;
    if (1 << 20..=1 << 30).contains(&bytes) { Ok(bytes) } else { Err(bad()) }
}

/// An issuer URL as OIDC wants it: https (http only for a loopback address, as tests and local
/// emulators use), a host, no path, query or fragment, since discovery is read at
/// `<issuer>/.well-known/openid-configuration` and the hub serves it at its root.
pub(super) fn oidc_issuer(raw: &str) -> Result<Option<String>, String> {
    let bad = || {
        format!(
            "must be the https URL the hub is reached at, without a path, such as https://hub.example.com (got {})",
            quoted(raw)
        )
    };
    let url = url::Url::parse(raw).map_err(|_| bad())?;
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => return Err(bad()),
    };
    let scheme_ok = url.scheme() == "https" || (url.scheme() == "http" && loopback);
    if !scheme_ok
        || url.path() != "/"
        || url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
    {
        return Err(bad());
    }
    Ok(Some(raw.trim_end_matches('/').to_owned()))
}

/// `STREAMING_HUB_PORTAL_FRAME_ANCESTORS`: CSP `frame-ancestors` sources, space-separated —
/// `'none'` alone, or any of `'self'`, a scheme (`https:`) and origins (`https://app.example.com`,
/// `https://*.example.com:8443`).
pub(super) fn frame_ancestors(raw: &str) -> Result<String, String> {
    let sources: Vec<&str> = raw.split_ascii_whitespace().collect();
    if sources.is_empty() {
        return Err("must name at least one source ('none' forbids embedding)".to_owned());
    }
    if sources.contains(&"'none'") {
        return if sources.len() == 1 { Ok("'none'".to_owned()) } else { Err("'none' must stand alone".to_owned()) };
    }
    for source in &sources {
        let ok = *source == "'self'"
            || matches!(*source, "https:" | "http:")
            || source.split_once("://").is_some_and(|(scheme, rest)| {
                matches!(scheme, "https" | "http")
                    && !rest.is_empty()
                    && rest.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '*' | '/'))
                    && !rest.starts_with('/')
            });
        if !ok {
            return Err(format!(
                "{} is not a frame source: use 'self', https:, or origins such as https://app.example.com",
                quoted(source)
            ));
        }
    }
    Ok(sources.join(" "))
}

/// `STREAMING_HUB_SSO_ISSUERS`: comma-separated issuer URLs (a path is allowed, as Keycloak's
/// realms have; no query or fragment), `https` — or `http` on a loopback address where `local`
/// allows it. Without a trailing `/`, as tokens' `iss` is compared.
pub(super) fn sso_issuers(raw: &str, local: bool) -> Result<Vec<String>, String> {
    let mut issuers: Vec<String> = Vec::new();
    for (i, entry) in raw.split(',').map(str::trim).enumerate() {
        let n = i + 1;
        let bad = |why: &str| format!("entry {n} ({}) {why}", quoted(entry));
        let url = url::Url::parse(entry).map_err(|_| bad("is not a URL"))?;
        let loopback = match url.host() {
            Some(url::Host::Domain(d)) => d == "localhost",
            Some(url::Host::Ipv4(a)) => a.is_loopback(),
            Some(url::Host::Ipv6(a)) => a.is_loopback(),
            None => return Err(bad("names no host")),
        };
        match url.scheme() {
            "https" => {}
            "http" if local && loopback => {}
            "http" => return Err(bad("must be https (http only on a loopback address in local)")),
            _ => return Err(bad("must be an https URL")),
        }
        if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
            return Err(bad("must not have a query, a fragment or credentials"));
        }
        let issuer = entry.trim_end_matches('/').to_owned();
        if !issuers.contains(&issuer) {
            issuers.push(issuer);
        }
    }
    if issuers.len() > 16 {
        return Err("names more than 16 issuers".to_owned());
    }
    Ok(issuers)
}

/// `STREAMING_HUB_SSO_ROLES_CLAIM`: a claim name, or a dot-separated path into nested claims.
pub(super) fn roles_claim(raw: &str) -> Result<String, String> {
    let ok = !raw.is_empty()
        && raw.len() <= 200
        && raw
            .split('.')
            .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || "_-:/".contains(c)));
    if ok {
        Ok(raw.to_owned())
    } else {
        Err(format!("must be a claim name or a dot-separated path such as realm_access.roles (got {})", quoted(raw)))
    }
}

/// Manifest sources this many, at most.
pub(super) const MAX_MANIFEST_SOURCES: usize = 64;

/// `STREAMING_HUB_MANIFEST_SOURCES`: comma-separated `http(s)` URLs and `file:` paths.
pub(super) fn manifest_sources(raw: &str) -> Result<Vec<String>, String> {
    let mut sources: Vec<String> = Vec::new();
    for (i, entry) in raw.split(',').map(str::trim).enumerate() {
        let n = i + 1;
        if entry.is_empty() {
            return Err(format!("entry {n} is empty"));
        }
        if let Some(path) = entry.strip_prefix("file:") {
            if path.trim_start_matches('/').is_empty() {
                return Err(format!("entry {n} ({}) names no file", quoted(entry)));
            }
        } else {
            match url::Url::parse(entry) {
                Ok(u) if (u.scheme() == "http" || u.scheme() == "https") && u.host().is_some() => {}
                _ => return Err(format!("entry {n} ({}) must be an http(s) URL or a file: path", quoted(entry))),
            }
        }
        if !sources.iter().any(|s| s == entry) {
            sources.push(entry.to_owned());
        }
    }
    if sources.len() > MAX_MANIFEST_SOURCES {
        return Err(format!("names more than {MAX_MANIFEST_SOURCES} sources"));
    }
    Ok(sources)
}

/// What a body that does not satisfy its producer's schema becomes
/// (`STREAMING_HUB_VALIDATE_PAYLOADS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadValidation {
    /// Bodies are not checked.
    Off,
    /// Checked; a mismatch is accepted and counted.
    Warn,
    /// Checked; a mismatch is quarantined with reason `schema_mismatch`.
    Quarantine,
}

impl PayloadValidation {
    pub fn parse(raw: &str) -> Result<Self, String> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(Self::Off),
            "warn" => Ok(Self::Warn),
            "quarantine" => Ok(Self::Quarantine),
            _ => Err(format!("must be off, warn or quarantine (got {})", quoted(raw))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Warn => "warn",
            Self::Quarantine => "quarantine",
        }
    }
}
