//! Which destination addresses are public.
//!
//! A push sink must not reach the hub's own network unless the operator allows private sinks:
//! loopback, private, link-local (cloud metadata included), carrier-grade NAT, multicast,
//! unspecified, broadcast, documentation and benchmarking ranges, IPv6 unique-local and
//! link-local, and IPv4-mapped or -translated IPv6 addresses (judged by the IPv4 inside, so
//! `::ffff:127.0.0.1` cannot hide a loopback) are all refused. So is every other block of the
//! IANA special-purpose registries that is not plainly global unicast: 6to4 (`2002::/16`) and
//! Teredo (`2001::/32`, inside `2001::/23`), whose IPv4 inside is not to be trusted; local-use
//! NAT64 (`64:ff9b:1::/48`); discard-only (`100::/64`); documentation (`3fff::/20`); SRv6 SIDs
//! (`5f00::/16`); and the deprecated 6to4 relay anycast `192.88.99.0/24`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not public.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restricted {
    Loopback,
    Private,
    LinkLocal,
    SharedAddressSpace,
    Multicast,
    Unspecified,
    Reserved,
    UniqueLocal,
}

impl Restricted {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::LinkLocal => "link-local",
            Self::SharedAddressSpace => "carrier-grade NAT",
            Self::Multicast => "multicast",
            Self::Unspecified => "unspecified",
            Self::Reserved => "reserved",
            Self::UniqueLocal => "unique-local",
        }
    }
}

fn v4(ip: Ipv4Addr) -> Option<Restricted> {
    let [a, b, c, _] = ip.octets();
    Some(match () {
        _ if ip.is_loopback() => Restricted::Loopback,
        _ if ip.is_private() => Restricted::Private,
        _ if ip.is_link_local() => Restricted::LinkLocal,
        _ if a == 100 && (64..128).contains(&b) => Restricted::SharedAddressSpace,
        _ if ip.is_multicast() => Restricted::Multicast,
        _ if ip.is_unspecified() || a == 0 => Restricted::Unspecified,
        _ if ip.is_broadcast() || a >= 240 => Restricted::Reserved,
        // Documentation (TEST-NET-1/2/3), benchmarking (198.18/15) and IETF protocol assignments.
        _ if (a, b, c) == (192, 0, 2) || (a, b, c) == (198, 51, 100) || (a, b, c) == (203, 0, 113) => {
            Restricted::Reserved
        }
        _ if a == 198 && (b == 18 || b == 19) => Restricted::Reserved,
        _ if (a, b, c) == (192, 0, 0) => Restricted::Reserved,
        _ if (a, b, c) == (192, 88, 99) => Restricted::Reserved,
        _ => return None,
    })
}

fn v6(ip: Ipv6Addr) -> Option<Restricted> {
    let segments = ip.segments();
    // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::/96).
    if let Some(inner) = ip.to_ipv4_mapped() {
        return Some(v4(inner).unwrap_or(Restricted::Reserved));
    }
    if segments[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_loopback() && !ip.is_unspecified() {
        return Some(Restricted::Reserved);
    }
    // IPv4-translated (::ffff:0:a.b.c.d, SIIT).
    if segments[..6] == [0, 0, 0, 0, 0xffff, 0] {
        let inner = Ipv4Addr::from(((segments[6] as u32) << 16) | segments[7] as u32);
        return Some(v4(inner).unwrap_or(Restricted::Reserved));
    }
    if segments[0] == 0x64 && segments[1] == 0xff9b {
        // The well-known NAT64 prefix carries the IPv4 inside; local-use NAT64 (64:ff9b:1::/48)
        // translates into a site's own network.
        if segments[2..6] == [0, 0, 0, 0] {
            let inner = Ipv4Addr::from(((segments[6] as u32) << 16) | segments[7] as u32);
            return Some(v4(inner).unwrap_or(Restricted::Reserved));
        }
        return Some(Restricted::Reserved);
    }
    Some(match () {
        _ if ip.is_loopback() => Restricted::Loopback,
        _ if ip.is_unspecified() => Restricted::Unspecified,
        _ if ip.is_multicast() => Restricted::Multicast,
        _ if segments[0] & 0xfe00 == 0xfc00 => Restricted::UniqueLocal,
        _ if segments[0] & 0xffc0 == 0xfe80 => Restricted::LinkLocal,
        // Site-local (deprecated, still routed privately) and documentation.
        _ if segments[0] & 0xffc0 == 0xfec0 => Restricted::Private,
        _ if segments[0] == 0x2001 && segments[1] == 0x0db8 => Restricted::Reserved,
        // IETF protocol assignments (Teredo, benchmarking, ORCHID among them) and 6to4.
        _ if segments[0] == 0x2001 && segments[1] < 0x0200 => Restricted::Reserved,
        _ if segments[0] == 0x2002 => Restricted::Reserved,
        // Discard-only, documentation (RFC 9637), SRv6 SIDs.
        // Discard-only (100::/64) and the dummy prefix (100:0:0:1::/64).
        _ if segments[..3] == [0x0100, 0, 0] && segments[3] <= 1 => Restricted::Reserved,
        _ if segments[0] & 0xfff0 == 0x3ff0 => Restricted::Reserved,
        _ if segments[0] == 0x5f00 => Restricted::Reserved,
        _ => return None,
    })
}

/// `None` when `ip` is a public address a push sink may reach; otherwise why not.
pub fn restriction(ip: IpAddr) -> Option<Restricted> {
    match ip {
        IpAddr::V4(ip) => v4(ip),
        IpAddr::V6(ip) => v6(ip),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_private_range_is_restricted() {
        for (ip, why) in [
            ("127.0.0.1", Restricted::Loopback),
            ("10.1.2.3", Restricted::Private),
            ("172.16.0.1", Restricted::Private),
            ("192.168.1.1", Restricted::Private),
            ("169.254.169.254", Restricted::LinkLocal),
            ("100.64.0.1", Restricted::SharedAddressSpace),
            ("100.127.255.254", Restricted::SharedAddressSpace),
            ("224.0.0.1", Restricted::Multicast),
            ("0.0.0.0", Restricted::Unspecified),
            ("255.255.255.255", Restricted::Reserved),
            ("192.0.2.10", Restricted::Reserved),
            ("::1", Restricted::Loopback),
            ("::", Restricted::Unspecified),
            ("fd00::1", Restricted::UniqueLocal),
            ("fc00::1", Restricted::UniqueLocal),
            ("fe80::1", Restricted::LinkLocal),
            ("ff02::1", Restricted::Multicast),
            ("::ffff:127.0.0.1", Restricted::Loopback),
            ("::ffff:10.0.0.1", Restricted::Private),
            ("::ffff:8.8.8.8", Restricted::Reserved),
            ("64:ff9b::a9fe:a9fe", Restricted::LinkLocal),
            ("2001:db8::1", Restricted::Reserved),
            ("::ffff:0:7f00:1", Restricted::Loopback),
            ("::ffff:0:a00:1", Restricted::Private),
            ("2002:7f00:1::1", Restricted::Reserved),
            ("2002:0808:0808::1", Restricted::Reserved),
            ("2001::1", Restricted::Reserved),
            ("2001:2::1", Restricted::Reserved),
            ("64:ff9b:1::a00:1", Restricted::Reserved),
            ("64:ff9b:1::808:808", Restricted::Reserved),
            ("100::1", Restricted::Reserved),
            ("3fff::1", Restricted::Reserved),
            ("5f00::1", Restricted::Reserved),
            ("192.88.99.1", Restricted::Reserved),
            ("198.19.255.255", Restricted::Reserved),
            ("192.0.0.8", Restricted::Reserved),
            ("203.0.113.7", Restricted::Reserved),
            ("198.51.100.7", Restricted::Reserved),
            ("240.0.0.1", Restricted::Reserved),
            ("0.1.2.3", Restricted::Unspecified),
            ("172.31.255.255", Restricted::Private),
            ("fec0::1", Restricted::Private),
        ] {
            assert_eq!(restriction(ip.parse().expect("ip")), Some(why), "{ip}");
        }
    }

    /// Every block of the IANA IPv4 and IPv6 special-purpose address registries, by a sample
    /// address inside it: what the registry says is not globally reachable is refused; what it
    /// says is global (anycast services, AS112, AMT) is a public destination like any other,
    /// except where refusing costs no one a webhook (the IETF assignment blocks, wholly refused).
    #[test]
    fn the_iana_special_purpose_registries() {
        let restricted = [
            ("0.0.0.0/8", "0.1.2.3"),
            ("10.0.0.0/8", "10.20.30.40"),
            ("100.64.0.0/10", "100.100.100.100"),
            ("127.0.0.0/8", "127.3.2.1"),
            ("169.254.0.0/16", "169.254.1.1"),
            ("172.16.0.0/12", "172.20.0.1"),
            ("192.0.0.0/24", "192.0.0.1"),
            ("192.0.0.0/29", "192.0.0.5"),
            ("192.0.0.8/32", "192.0.0.8"),
            ("192.0.0.170/32", "192.0.0.170"),
            ("192.0.2.0/24", "192.0.2.55"),
            ("192.88.99.0/24", "192.88.99.2"),
            ("192.168.0.0/16", "192.168.200.1"),
            ("198.18.0.0/15", "198.19.1.1"),
            ("198.51.100.0/24", "198.51.100.1"),
            ("203.0.113.0/24", "203.0.113.9"),
            ("240.0.0.0/4", "250.1.2.3"),
            ("255.255.255.255/32", "255.255.255.255"),
            ("::1/128", "::1"),
            ("::/128", "::"),
            ("::ffff:0:0/96", "::ffff:10.1.1.1"),
            ("64:ff9b::/96 (private inside)", "64:ff9b::10.0.0.1"),
            ("64:ff9b:1::/48", "64:ff9b:1::1"),
            ("100::/64", "100::1"),
            ("100:0:0:1::/64", "100:0:0:1::1"),
            ("2001::/23", "2001:1ff::1"),
            ("2001::/32", "2001:0:4136:e378::1"),
            ("2001:2::/48", "2001:2::1"),
            ("2001:10::/28", "2001:10::1"),
            ("2001:20::/28", "2001:20::1"),
            ("2001:30::/28", "2001:30::1"),
            ("2001:db8::/32", "2001:db8:1::1"),
            ("2002::/16", "2002:c000:204::1"),
            ("3fff::/20", "3fff:fff::1"),
            ("5f00::/16", "5f00:1::1"),
            ("fc00::/7", "fdff::1"),
            ("fe80::/10", "febf::1"),
            ("ff00::/8", "ff05::2"),
        ];
        for (block, ip) in restricted {
            assert!(restriction(ip.parse().expect(ip)).is_some(), "{block}: {ip} must be refused");
        }
        let global = [
            ("192.31.196.0/24 (AS112)", "192.31.196.1"),
            ("192.52.193.0/24 (AMT)", "192.52.193.1"),
            ("192.175.48.0/24 (AS112)", "192.175.48.1"),
            ("2620:4f:8000::/48 (AS112)", "2620:4f:8000::1"),
        ];
        for (block, ip) in global {
            assert!(restriction(ip.parse().expect(ip)).is_none(), "{block}: {ip} is global");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "100.128.0.1",
            "172.32.0.1",
            "192.88.100.1",
            "2606:4700:4700::1111",
            "2a00:1450::1",
            "2001:4860:4860::8888",
        ] {
            assert_eq!(restriction(ip.parse().expect("ip")), None, "{ip}");
        }
    }
}
