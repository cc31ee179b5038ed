//! Client address policy: CIDR sets compiled into prefix tries, the
//! allow/deny decision, and the client IP as seen through trusted proxies.
//!
//! Owns [`CidrSet`] and [`AccessControl`]. Must not touch: I/O. Never fails
//! open: an empty allow list means "allow all" only because the operator
//! wrote it so, never because a source went away.

use std::net::IpAddr;

use http::HeaderMap;
use ipnet::IpNet;
use prefix_trie::joint::JointPrefixSet;

/// A set of IPv4/IPv6 networks with O(prefix length) membership tests.
#[derive(Clone, Debug, Default)]
pub struct CidrSet {
    set: JointPrefixSet<IpNet>,
    len: usize,
}

impl CidrSet {
    pub fn new(nets: &[IpNet]) -> CidrSet {
        let mut set = JointPrefixSet::new();
        for n in nets {
            set.insert(canonical_net(n.trunc()));
        }
        CidrSet {
            set,
            len: nets.len(),
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Is `ip` inside any network of the set? An IPv4-mapped IPv6 address
    /// (`::ffff:10.1.2.3`, how a dual-stack listener sees IPv4 peers) is
    /// matched as the IPv4 address it is, so IPv4 rules hold for it.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.len != 0 && self.set.get_spm(&IpNet::from(ip.to_canonical())).is_some()
    }
}

/// The compiled `access:` section.
#[derive(Clone, Debug, Default)]
pub struct AccessControl {
    allow: CidrSet,
    deny: CidrSet,
    trusted: CidrSet,
}

impl AccessControl {
    pub fn new(allow: &[IpNet], deny: &[IpNet], trusted: &[IpNet]) -> AccessControl {
        AccessControl {
            allow: CidrSet::new(allow),
            deny: CidrSet::new(deny),
            trusted: CidrSet::new(trusted),
        }
    }

    /// Deny wins over allow; an empty allow list allows everyone not denied.
    /// Without lists (the common case), two loads and no call.
    #[inline]
    pub fn permits(&self, ip: IpAddr) -> bool {
        if self.deny.is_empty() && self.allow.is_empty() {
            return true;
        }
        !self.deny.contains(ip) && (self.allow.is_empty() || self.allow.contains(ip))
    }

    /// Whether `peer` is one of `access.trusted_proxies`.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        !self.trusted.is_empty() && self.trusted.contains(peer.to_canonical())
    }

    /// The client's address: the peer, unless the peer is a trusted proxy,
    /// always in canonical form (an IPv4-mapped IPv6 address becomes the
    /// IPv4 address, so IPv4 CIDR rules and hashing see it as IPv4);
    /// in which case `X-Forwarded-For` is walked from the right, skipping
    /// trusted proxies; the first untrusted hop is the client. `Forwarded:
    /// for=` is used the same way when `X-Forwarded-For` is absent.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        if self.trusted.is_empty() || !self.trusted.contains(peer) {
            return peer;
        }
        let mut client = peer;
        let mut walk = |value: &str, forwarded: bool| -> bool {
            for hop in value.rsplit(',') {
                let hop = hop.trim();
                let hop = if forwarded {
                    match forwarded_for(hop) {
                        Some(h) => h,
                        None => continue,
                    }
                } else {
                    hop
                };
                match parse_hop_ip(hop) {
                    Some(ip) => {
                        client = ip;
                        if !self.trusted.contains(ip) {
                            return true;
                        }
                    }
                    None => return true,
                }
            }
            false
        };
        let xff = headers.get_all("x-forwarded-for");
        if xff.iter().next().is_some() {
            let values: Vec<&str> = xff.iter().filter_map(|v| v.to_str().ok()).collect();
            for v in values.iter().rev() {
                if walk(v, false) {
                    break;
                }
            }
        } else {
            let fwd: Vec<&str> = headers
                .get_all("forwarded")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            for v in fwd.iter().rev() {
                if walk(v, true) {
                    break;
                }
            }
        }
        client
    }
}

/// `for=` of one `Forwarded` element (`for=1.2.3.4;proto=http`).
fn forwarded_for(element: &str) -> Option<&str> {
    element.split(';').find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        k.eq_ignore_ascii_case("for").then(|| v.trim_matches('"'))
    })
}

/// An IP from an XFF/Forwarded hop: `1.2.3.4`, `1.2.3.4:5678`, `[::1]:80`,
/// `::1`; canonical (IPv4-mapped addresses as IPv4).
fn parse_hop_ip(hop: &str) -> Option<IpAddr> {
    let ip: IpAddr = if let Ok(ip) = hop.parse() {
        ip
    } else if let Some(rest) = hop.strip_prefix('[') {
        rest.split(']').next()?.parse().ok()?
    } else {
        hop.rsplit_once(':').and_then(|(h, _)| h.parse().ok())?
    };
    Some(ip.to_canonical())
}

/// A network written in IPv4-mapped form (`::ffff:10.0.0.0/104`) as the
/// IPv4 network it covers (`10.0.0.0/8`), since lookups are canonical.
fn canonical_net(n: IpNet) -> IpNet {
    match n {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(n, IpNet::V4),
            None => n,
        },
        _ => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn nets(s: &[&str]) -> Vec<IpNet> {
        s.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn cidr_membership() {
        let s = CidrSet::new(&nets(&["10.0.0.0/8", "192.168.1.0/24", "fd00::/8"]));
        assert!(s.contains("10.1.2.3".parse().unwrap()));
        assert!(s.contains("192.168.1.200".parse().unwrap()));
        assert!(!s.contains("192.168.2.1".parse().unwrap()));
        assert!(s.contains("fd12::1".parse().unwrap()));
        assert!(!s.contains("::1".parse().unwrap()));
        assert!(!CidrSet::new(&[]).contains("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn allow_deny() {
        let a = AccessControl::new(&nets(&["10.0.0.0/8"]), &nets(&["10.9.0.0/16"]), &[]);
        assert!(a.permits("10.1.1.1".parse().unwrap()));
        assert!(!a.permits("10.9.1.1".parse().unwrap()));
        assert!(!a.permits("11.0.0.1".parse().unwrap()));
        let open = AccessControl::new(&[], &nets(&["1.2.3.4/32"]), &[]);
        assert!(open.permits("8.8.8.8".parse().unwrap()));
        assert!(!open.permits("1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn ipv4_mapped_peers_match_ipv4_rules() {
        let mapped: IpAddr = "::ffff:10.9.1.1".parse().unwrap();
        let deny = AccessControl::new(&[], &nets(&["10.9.0.0/16"]), &[]);
        assert!(
            !deny.permits(mapped),
            "a mapped IPv4 peer bypassed deny_cidrs"
        );
        let allow = AccessControl::new(&nets(&["192.168.0.0/16"]), &[], &[]);
        assert!(
            !allow.permits(mapped),
            "a mapped IPv4 peer outside allow_cidrs got in"
        );
        assert!(allow.permits("::ffff:192.168.3.4".parse().unwrap()));
        // The client address is canonical, so route predicates and hashing
        // see IPv4.
        assert_eq!(
            deny.client_ip(mapped, &HeaderMap::new()),
            "10.9.1.1".parse::<IpAddr>().unwrap()
        );
        // Trusted proxies written as IPv4 hold for mapped peers, and mapped
        // addresses in X-Forwarded-For are canonical too.
        let t = AccessControl::new(&[], &[], &nets(&["127.0.0.0/8"]));
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("::ffff:203.0.113.7"),
        );
        assert_eq!(
            t.client_ip("::ffff:127.0.0.1".parse().unwrap(), &h),
            "203.0.113.7".parse::<IpAddr>().unwrap()
        );
        // A network written in mapped form covers the IPv4 addresses.
        let s = CidrSet::new(&nets(&["::ffff:10.0.0.0/104"]));
        assert!(s.contains("10.1.2.3".parse().unwrap()));
        assert!(s.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!s.contains("11.1.2.3".parse().unwrap()));
    }

    #[test]
    fn client_ip_through_trusted_proxies() {
        let a = AccessControl::new(&[], &[], &nets(&["127.0.0.0/8", "10.0.0.0/8"]));
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("203.0.113.7, 10.0.0.2"),
        );
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(
            a.client_ip(peer, &h),
            "203.0.113.7".parse::<IpAddr>().unwrap()
        );
        // an untrusted peer's XFF is ignored
        let untrusted: IpAddr = "198.51.100.1".parse().unwrap();
        assert_eq!(a.client_ip(untrusted, &h), untrusted);
        // spoofed left-most entries behind an untrusted hop are not believed
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("1.1.1.1, 198.51.100.9, 10.0.0.2"),
        );
        assert_eq!(
            a.client_ip(peer, &h),
            "198.51.100.9".parse::<IpAddr>().unwrap()
        );
        let mut f = HeaderMap::new();
        f.insert(
            "forwarded",
            HeaderValue::from_static("for=\"[2001:db8::1]:4711\";proto=https"),
        );
        assert_eq!(
            a.client_ip(peer, &f),
            "2001:db8::1".parse::<IpAddr>().unwrap()
        );
    }
}
