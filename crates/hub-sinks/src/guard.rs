//! The SSRF guard: destinations must be public unless the operator allows private sinks.
//!
//! Host names are resolved once, by [`GuardedResolver`]; every address must be public, and the
//! HTTP client connects to exactly the addresses that were checked (no second resolution, so a
//! DNS answer cannot change between the check and the connection). Address literals never reach
//! a resolver, so [`check_host`] checks them before any request.

use std::net::{IpAddr, SocketAddr};

use hub_core::netpolicy::restriction;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// What a tenant is told of a refused destination, whatever the reason.
pub const NOT_ALLOWED: &str = "destination not allowed";

/// Why the guard refused a destination: for the operator's log, never for the tenant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("destination {host} resolves to a {why} address; private destinations are not allowed")]
pub struct Refused {
    pub host: String,
    pub why: &'static str,
}

/// Checks one address.
pub fn check_ip(host: &str, ip: IpAddr, allow_private: bool) -> Result<(), Refused> {
    match restriction(ip) {
        Some(why) if !allow_private => Err(Refused { host: host.to_owned(), why: why.as_str() }),
        _ => Ok(()),
    }
}

/// Checks a URL's host when it is an address literal (or `localhost`); names are checked when
/// they are resolved.
pub fn check_host(url: &url::Url, allow_private: bool) -> Result<(), Refused> {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => check_ip(&ip.to_string(), ip.into(), allow_private),
        Some(url::Host::Ipv6(ip)) => check_ip(&ip.to_string(), ip.into(), allow_private),
        Some(url::Host::Domain(d)) if !allow_private => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            if d == "localhost" || d.ends_with(".localhost") {
                Err(Refused { host: d, why: "loopback" })
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

/// Resolves `host` (a name or an address literal in any form the system resolver takes, such as
/// `2130706433` or `127.1`) and refuses it unless every address it resolves to may be reached.
/// For clients that resolve on their own (AMQP, the AWS SDK): checked right before they connect.
/// Returns the addresses it checked (none when private sinks are allowed: nothing was resolved).
pub async fn check_resolved(host: &str, port: u16, allow_private: bool) -> Result<Vec<SocketAddr>, Resolution> {
    if allow_private {
        return Ok(Vec::new());
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let name = bare.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return Err(Resolution::Refused(Refused { host: name, why: "loopback" }));
    }
    let addrs: Vec<SocketAddr> =
        tokio::net::lookup_host((bare, port)).await.map_err(|_| Resolution::Unresolved)?.collect();
    if addrs.is_empty() {
        return Err(Resolution::Unresolved);
    }
    for addr in &addrs {
        check_ip(host, addr.ip(), false).map_err(Resolution::Refused)?;
    }
    Ok(addrs)
}

/// [`check_resolved`] for the host of `url`, as a classified failure for the tenant: a refusal
/// says only [`NOT_ALLOWED`] (the operator's log says why); a name that does not resolve is
/// worth another attempt.
pub async fn check_url(url: &str, allow_private: bool) -> Result<(), crate::Failure> {
    checked_url(url, allow_private).await.map(|_| ())
}

/// [`check_url`], and the URL to dial: for plain `amqp` the host is replaced by an address that
/// was checked, so the client connects where the guard looked (no second resolution a DNS answer
/// could change in between). Other schemes keep their name: TLS must verify the certificate
/// against it (`amqps` is then resolved again by the client, right after the check).
pub async fn pinned_url(url: &str, allow_private: bool) -> Result<String, crate::Failure> {
    let addrs = checked_url(url, allow_private).await?;
    Ok(pin(url, &addrs))
}

/// `url` with its host replaced by the first of `addrs` when its scheme is `amqp`.
fn pin(url: &str, addrs: &[SocketAddr]) -> String {
    let (Ok(mut parsed), Some(first)) = (url::Url::parse(url), addrs.first()) else { return url.to_owned() };
    if parsed.scheme() != "amqp" || parsed.set_ip_host(first.ip()).is_err() {
        return url.to_owned();
    }
    parsed.to_string()
}

async fn checked_url(url: &str, allow_private: bool) -> Result<Vec<SocketAddr>, crate::Failure> {
    use crate::{Failure, FailureKind};
    let failure = |retryable, kind, reason: &str| Failure {
        retryable,
        kind,
        reason: reason.to_owned(),
        status: None,
        response: None,
    };
    let parsed =
        url::Url::parse(url).map_err(|_| failure(true, FailureKind::Refused, "the destination URL is not valid"))?;
    let host =
        parsed.host_str().ok_or_else(|| failure(true, FailureKind::Refused, "the destination URL names no host"))?;
    let port = parsed.port_or_known_default().unwrap_or(if parsed.scheme() == "amqps" { 5671 } else { 5672 });
    match check_resolved(host, port, allow_private).await {
        Ok(addrs) => Ok(addrs),
        Err(Resolution::Refused(refused)) => {
            tracing::warn!(detail = %refused, "destination refused by the address guard");
            Err(failure(false, FailureKind::Forbidden, NOT_ALLOWED))
        }
        Err(Resolution::Unresolved) => {
            Err(failure(true, FailureKind::Unreachable, "the destination's host does not resolve"))
        }
    }
}

/// Why [`check_resolved`] did not clear a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    Refused(Refused),
    /// The name does not resolve (now): retry later.
    Unresolved,
}

/// A resolver that refuses names with any non-public address.
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver {
    pub allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            for addr in &addrs {
                // One private answer refuses the name: a mixed answer is how rebinding starts.
                check_ip(&host, addr.ip(), allow_private)?;
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_amqp_dials_the_checked_address_and_keeps_the_rest() {
        let v4: SocketAddr = "203.0.113.7:5672".parse().expect("addr");
        let v6: SocketAddr = "[2001:db8::7]:5672".parse().expect("addr");
        assert_eq!(
            pin("amqp://hub:p%2Bss@rabbit.example.com:5673/%2fprod", &[v4]),
            "amqp://hub:p%2Bss@203.0.113.7:5673/%2fprod"
        );
        assert_eq!(pin("amqp://rabbit.example.com/", &[v6]), "amqp://[2001:db8::7]/");
        // TLS verifies the name: kept. Nothing checked (private sinks allowed): kept.
        assert_eq!(pin("amqps://rabbit.example.com/", &[v4]), "amqps://rabbit.example.com/");
        assert_eq!(pin("amqp://rabbit.example.com/", &[]), "amqp://rabbit.example.com/");
    }

    #[tokio::test]
    async fn names_resolving_to_private_addresses_are_refused() {
        let guard = GuardedResolver { allow_private: false };
        let name: Name = "localhost".parse().expect("name");
        let err = guard.resolve(name).await.err().expect("refused");
        assert!(err.to_string().contains("loopback"), "{err}");
        let open = GuardedResolver { allow_private: true };
        let addrs: Vec<_> = open.resolve("localhost".parse().expect("name")).await.expect("resolves").collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
    }

    #[test]
    fn literals_are_checked_before_any_request() {
        for url in [
            "https://127.0.0.1/",
            "https://[::1]/",
            "https://10.0.0.1/",
            "https://169.254.169.254/",
            "https://localhost/",
        ] {
            assert!(check_host(&url.parse().expect("url"), false).is_err(), "{url}");
            assert!(check_host(&url.parse().expect("url"), true).is_ok(), "{url}");
        }
        assert!(check_host(&"https://8.8.8.8/".parse().expect("url"), false).is_ok());
        assert!(check_host(&"https://example.com/".parse().expect("url"), false).is_ok());
    }
}
