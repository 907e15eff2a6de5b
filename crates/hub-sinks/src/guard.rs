//! The SSRF guard: destinations must be public unless the operator allows private sinks.
//!
//! Every connection a sink opens goes through here: a host is resolved once, every address it
//! resolves to must be public, and the client dials exactly the addresses that were checked (no
//! second resolution, so a DNS answer cannot change between the check and the connection):
//!
//! - the webhook client resolves through [`GuardedResolver`]; address literals never reach a
//!   resolver, so [`check_host`] checks them before any request;
//! - the RabbitMQ sink dials the addresses of [`dial_addrs`] itself (TLS still verifies the
//!   certificate against the URL's host name);
//! - the AWS clients for a tenant's own endpoint resolve through [`GuardedDns`].

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
/// Returns the addresses it checked: a client dials only these (no second resolution, so a DNS
/// answer that changes between the check and the connection cannot send it elsewhere).
pub async fn check_resolved(host: &str, port: u16, allow_private: bool) -> Result<Vec<SocketAddr>, Resolution> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let name = bare.trim_end_matches('.').to_ascii_lowercase();
    if !allow_private && (name == "localhost" || name.ends_with(".localhost")) {
        return Err(Resolution::Refused(Refused { host: name, why: "loopback" }));
    }
    let addrs: Vec<SocketAddr> =
        tokio::net::lookup_host((bare, port)).await.map_err(|_| Resolution::Unresolved)?.collect();
    checked(host, addrs, allow_private)
}

/// Clears resolved addresses: all of them, or none (one private answer refuses the name: a mixed
/// answer is how rebinding starts).
fn checked(host: &str, addrs: Vec<SocketAddr>, allow_private: bool) -> Result<Vec<SocketAddr>, Resolution> {
    if addrs.is_empty() {
        return Err(Resolution::Unresolved);
    }
    for addr in &addrs {
        check_ip(host, addr.ip(), allow_private).map_err(Resolution::Refused)?;
    }
    Ok(addrs)
}

/// The addresses a client may dial for `url`, checked by [`check_resolved`], as a classified
/// failure for the tenant: a refusal says only [`NOT_ALLOWED`] (the operator's log says why); a
/// name that does not resolve is worth another attempt.
pub async fn dial_addrs(url: &str, allow_private: bool) -> Result<Vec<SocketAddr>, crate::sink::Failure> {
    use crate::sink::{FailureKind, failure};
    let parsed =
        url::Url::parse(url).map_err(|_| failure(true, FailureKind::Refused, "the destination URL is not valid"))?;
    let host =
        parsed.host_str().ok_or_else(|| failure(true, FailureKind::Refused, "the destination URL names no host"))?;
    let port = parsed.port_or_known_default().unwrap_or(if parsed.scheme() == "amqps" { 5671 } else { 5672 });
    checked_server("destination", host, port, allow_private).await
}

/// [`check_resolved`] for a server a sink dials by host and port (`what` names it in the log and
/// the reason: "Kafka broker", "NATS server", "Pub/Sub endpoint"), as a classified failure: a
/// refusal says only [`NOT_ALLOWED`]; a name that does not resolve is worth another attempt.
pub async fn checked_server(
    what: &str,
    host: &str,
    port: u16,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, crate::sink::Failure> {
    use crate::sink::{FailureKind, failure};
    check_resolved(host, port, allow_private).await.map_err(|e| match e {
        Resolution::Refused(refused) => {
            tracing::warn!(detail = %refused, server = what, "server refused by the address guard");
            failure(false, FailureKind::Forbidden, NOT_ALLOWED)
        }
        Resolution::Unresolved => {
            failure(true, FailureKind::Unreachable, format!("the {what} {host}:{port} does not resolve"))
        }
    })
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
            let addrs = checked(&host, addrs, allow_private).map_err(|e| match e {
                Resolution::Refused(refused) => Box::new(refused) as Box<dyn std::error::Error + Send + Sync>,
                Resolution::Unresolved => format!("{host} resolves to no address").into(),
            })?;
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// The resolver of the AWS clients made for a tenant's own endpoint: every connection the SDK
/// makes resolves through it, so each address it dials was checked at connect time.
#[derive(Debug, Clone, Copy)]
pub struct GuardedDns;

impl aws_smithy_runtime_api::client::dns::ResolveDns for GuardedDns {
    fn resolve_dns<'a>(&'a self, name: &'a str) -> aws_smithy_runtime_api::client::dns::DnsFuture<'a> {
        use aws_smithy_runtime_api::client::dns::{DnsFuture, ResolveDnsError};
        DnsFuture::new(async move {
            match check_resolved(name, 0, false).await {
                Ok(addrs) => Ok(addrs.into_iter().map(|a| a.ip()).collect()),
                Err(Resolution::Refused(refused)) => {
                    tracing::warn!(detail = %refused, "AWS endpoint refused by the address guard");
                    Err(ResolveDnsError::new(refused))
                }
                Err(Resolution::Unresolved) => Err(ResolveDnsError::new(format!("{name} resolves to no address"))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mixed_answer_refuses_the_name() {
        let public: SocketAddr = "8.8.8.8:443".parse().expect("addr");
        let private: SocketAddr = "10.0.0.7:443".parse().expect("addr");
        assert_eq!(checked("h", vec![public], false), Ok(vec![public]));
        assert!(
            matches!(checked("h", vec![public, private], false), Err(Resolution::Refused(r)) if r.why == "private")
        );
        assert_eq!(checked("h", vec![public, private], true), Ok(vec![public, private]));
        assert_eq!(checked("h", Vec::new(), true), Err(Resolution::Unresolved));
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

    #[tokio::test]
    async fn the_aws_resolver_refuses_private_answers() {
        use aws_smithy_runtime_api::client::dns::ResolveDns;
        for name in ["localhost", "127.0.0.1", "2130706433", "127.1", "10.1.2.3", "::1"] {
            assert!(GuardedDns.resolve_dns(name).await.is_err(), "{name}");
        }
        let public = GuardedDns.resolve_dns("8.8.8.8").await.expect("a public literal resolves to itself");
        assert_eq!(public, vec!["8.8.8.8".parse::<IpAddr>().expect("ip")]);
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
