//! Which hosts and addresses one pull may connect to. Image names come from repositories,
//! so the registry and every host it points at (redirects, token realms) are untrusted:
//! only public addresses are reached unless the operator lists the image's own registry
//! (REGISTRY_PRIVATE, REGISTRY_INSECURE), and plain HTTP only to that own host when listed.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The kinds of address that are not public.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Class {
    Loopback,
    /// RFC 1918, shared (CGNAT) space, fc00::/7 and the old site-local fec0::/10.
    Private,
    /// 169.254/16 (the cloud metadata service's) and fe80::/10.
    LinkLocal,
    Unspecified,
    /// Multicast, broadcast, documentation, benchmarking and reserved ranges.
    Reserved,
}

impl Class {
    fn describe(self) -> &'static str {
        match self {
            Class::Loopback => "a loopback address",
            Class::Private => "a private address",
            Class::LinkLocal => "a link-local address (where cloud metadata services answer)",
            Class::Unspecified => "the unspecified address",
            Class::Reserved => "a reserved address, not a public one",
        }
    }
}

/// `None` for a public address, else what kind of non-public one it is.
pub(super) fn classify(ip: IpAddr) -> Option<Class> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Class> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => Class::Unspecified,
        (127, _, _) => Class::Loopback,
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) | (100, 64..=127, _) => Class::Private,
        (169, 254, _) => Class::LinkLocal,
        (192, 0, 0 | 2) | (198, 51, 100) | (203, 0, 113) | (198, 18..=19, _) | (224.., _, _) => {
            Class::Reserved
        }
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Class> {
    let segments = ip.segments();
    // Addresses that carry an IPv4 one reach it: mapped (::ffff:a.b.c.d), the old
    // compatible form (::a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002::/16).
    let embedded = |high: u16, low: u16| {
        classify_v4(Ipv4Addr::new(
            (high >> 8) as u8,
            high as u8,
            (low >> 8) as u8,
            low as u8,
        ))
    };
    if ip.is_unspecified() {
        return Some(Class::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Class::Loopback);
    }
    match segments {
        [0, 0, 0, 0, 0, 0xffff, high, low] | [0, 0, 0, 0, 0, 0, high, low] => {
            return embedded(high, low);
        }
        [0x64, 0xff9b, 0, 0, 0, 0, high, low] => return embedded(high, low),
        [0x2002, high, low, ..] => return embedded(high, low),
        _ => {}
    }
    let first = segments[0];
    if first & 0xfe00 == 0xfc00 || first & 0xffc0 == 0xfec0 {
        Some(Class::Private)
    } else if first & 0xffc0 == 0xfe80 {
        Some(Class::LinkLocal)
    } else if first & 0xff00 == 0xff00
        || (first == 0x2001 && segments[1] == 0x0db8)
        || (first == 0x2001 && segments[1] < 0x0200)
        || (first == 0x0100 && segments[1..4] == [0, 0, 0])
    {
        Some(Class::Reserved)
    } else {
        None
    }
}

/// A host's address that the pull will not connect to.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{host} is {addr}, {}", .class.describe())]
pub(super) struct Blocked {
    pub host: String,
    pub addr: IpAddr,
    pub class: Class,
}

impl Blocked {
    /// What was refused and why, for an error message: `what` says how the pull got there
    /// ("redirected to", "its token service is at").
    pub fn explain(&self, what: &str) -> String {
        // A resolved address is not repeated: the message may be posted where whoever
        // named the image reads it, and it would answer their lookups of inside names.
        let at = if self.host == self.addr.to_string() {
            format!("{}, {}", self.host, self.class.describe())
        } else {
            tracing::warn!(host = %self.host, address = %self.addr, "a pull was refused a host resolving to {}", self.class.describe());
            format!("{}, which resolves to {}", self.host, self.class.describe())
        };
        format!(
            "{what} {at}; planwright follows a registry only to public addresses (the planwright operator may list an internal registry in REGISTRY_PRIVATE)"
        )
    }
}

/// One pull's rule for where it may go, from its image's own registry.
pub(super) struct Reach {
    /// The registry's host without port or brackets, lower-case.
    own_host: String,
    /// The registry may be reached over plain HTTP: listed in REGISTRY_INSECURE, or listed
    /// at all and on loopback (as Docker treats loopback).
    own_http: bool,
    /// The operator listed the registry: whatever it resolves to is reached, and those
    /// kinds of address become allowed for other hosts. An image name alone never vouches
    /// for itself, whether it spells a loopback or private address or `localhost`.
    own_vouched: bool,
    /// Non-public kinds of address other hosts may have: the listed registry's own.
    allowed: Mutex<HashSet<Class>>,
}

/// `host` or `host:port` as a reference or URL spells it, split into its bare host.
pub(super) fn bare_host(host_port: &str) -> String {
    let host = match host_port.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => host,
        _ => host_port,
    };
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

impl Reach {
    /// `registry` is the image's API host (`host[:port]`); `insecure` and `private` the
    /// operator's REGISTRY_INSECURE and REGISTRY_PRIVATE entries, `host` or `host:port`.
    pub(super) fn new(registry: &str, insecure: &[String], private: &[String]) -> Self {
        let registry = registry.to_ascii_lowercase();
        let own_host = bare_host(&registry);
        let bracketed = format!("[{own_host}]");
        let listed = |list: &[String]| {
            list.iter()
                .any(|h| *h == registry || *h == own_host || *h == bracketed)
        };
        let vouched = listed(insecure) || listed(private);
        let literal = own_host.parse::<IpAddr>().ok();
        let loopback =
            own_host == "localhost" || literal.and_then(classify) == Some(Class::Loopback);
        let allowed = match vouched {
            true => literal.and_then(classify).into_iter().collect(),
            false => HashSet::new(),
        };
        Self {
            own_http: listed(insecure) || (vouched && loopback),
            own_vouched: vouched,
            own_host,
            allowed: Mutex::new(allowed),
        }
    }

    /// Whether a URL to `host` (as the URL spells it) may use plain HTTP: only the
    /// registry itself, and only when it may.
    pub(super) fn plain_http(&self, host: &str) -> bool {
        self.own_http && bare_host(host) == self.own_host
    }

    pub(super) fn own_http(&self) -> bool {
        self.own_http
    }

    /// The address an IP-literal host names, checked (names are checked when resolved).
    pub(super) fn check_literal(&self, host: &str) -> Result<(), Blocked> {
        match bare_host(host).parse::<IpAddr>() {
            Ok(ip) => self.check(host, ip),
            Err(_) => Ok(()),
        }
    }

    fn check(&self, host: &str, ip: IpAddr) -> Result<(), Blocked> {
        let Some(class) = classify(ip) else {
            return Ok(());
        };
        let allowed = self.allowed.lock().unwrap_or_else(|e| e.into_inner());
        if allowed.contains(&class) {
            return Ok(());
        }
        Err(Blocked {
            host: bare_host(host),
            addr: ip,
            class,
        })
    }

    /// What `host` resolved to, keeping the addresses the pull may connect to; refused
    /// when none is left.
    pub(super) fn filter(
        &self,
        host: &str,
        addrs: Vec<SocketAddr>,
    ) -> Result<Vec<SocketAddr>, Blocked> {
        let host = host.to_ascii_lowercase();
        if self.own_vouched && bare_host(&host) == self.own_host {
            let mut allowed = self.allowed.lock().unwrap_or_else(|e| e.into_inner());
            allowed.extend(addrs.iter().filter_map(|a| classify(a.ip())));
            return Ok(addrs);
        }
        let mut first_refusal = None;
        let kept: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|addr| match self.check(&host, addr.ip()) {
                Ok(()) => true,
                Err(blocked) => {
                    first_refusal.get_or_insert(blocked);
                    false
                }
            })
            .collect();
        match first_refusal {
            Some(blocked) if kept.is_empty() => Err(blocked),
            _ => Ok(kept),
        }
    }
}

/// The name lookup a pull's HTTP client uses: the system's (or `lookup`), then [`Reach`].
pub(super) struct Guarded {
    pub reach: Arc<Reach>,
    pub lookup: Option<Arc<dyn Resolve>>,
}

impl Resolve for Guarded {
    fn resolve(&self, name: Name) -> Resolving {
        let reach = self.reach.clone();
        let lookup = self.lookup.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> = match lookup {
                Some(lookup) => lookup.resolve(name).await?.collect(),
                None => tokio::net::lookup_host((host.as_str(), 0)).await?.collect(),
            };
            let kept = reach.filter(&host, found)?;
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// The first cause of type `T` in an error's chain.
pub(super) fn cause<'e, T: std::error::Error + 'static>(
    error: &'e (dyn std::error::Error + 'static),
) -> Option<&'e T> {
    let mut source = Some(error);
    while let Some(inner) = source {
        if let Some(found) = inner.downcast_ref::<T>() {
            return Some(found);
        }
        source = inner.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn addresses_are_sorted_into_public_and_the_kinds_that_are_not() {
        for public in [
            "1.1.1.1",
            "140.82.112.3",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "2002:808:808::1",
        ] {
            assert_eq!(classify(ip(public)), None, "{public}");
        }
        for (address, class) in [
            ("127.0.0.1", Class::Loopback),
            ("127.9.9.9", Class::Loopback),
            ("::1", Class::Loopback),
            ("::ffff:127.0.0.1", Class::Loopback),
            ("10.0.0.5", Class::Private),
            ("172.16.3.4", Class::Private),
            ("172.31.255.255", Class::Private),
            ("192.168.1.1", Class::Private),
            ("100.64.0.1", Class::Private),
            ("fd00::1", Class::Private),
            ("fc12::1", Class::Private),
            ("64:ff9b::10.1.2.3", Class::Private),
            ("2002:a00:5::1", Class::Private),
            ("169.254.169.254", Class::LinkLocal),
            ("::ffff:169.254.169.254", Class::LinkLocal),
            ("fe80::1", Class::LinkLocal),
            ("0.0.0.0", Class::Unspecified),
            ("::", Class::Unspecified),
            ("224.0.0.1", Class::Reserved),
            ("255.255.255.255", Class::Reserved),
            ("192.0.2.1", Class::Reserved),
            ("ff02::1", Class::Reserved),
            ("2001:db8::1", Class::Reserved),
        ] {
            assert_eq!(classify(ip(address)), Some(class), "{address}");
        }
    }

    #[test]
    fn a_public_registry_reaches_only_public_addresses_and_never_plain_http() {
        let reach = Reach::new("ghcr.io", &[], &[]);
        assert!(!reach.plain_http("ghcr.io"));
        assert!(reach.check_literal("140.82.112.3").is_ok());
        for literal in [
            "127.0.0.1:5000",
            "10.0.0.5",
            "169.254.169.254",
            "[fe80::1]:80",
        ] {
            let blocked = reach.check_literal(literal).unwrap_err();
            assert!(
                blocked
                    .explain("redirected to")
                    .contains("planwright follows a registry only to public addresses"),
                "{literal}"
            );
        }
        let message = reach
            .check_literal("10.0.0.5")
            .unwrap_err()
            .explain("redirected to");
        assert!(
            message.starts_with("redirected to 10.0.0.5, a private address;"),
            "{message}"
        );
        // Its own name too: a registry whose name resolves inward is refused.
        let own = reach
            .filter("ghcr.io", vec!["10.1.1.1:443".parse().unwrap()])
            .unwrap_err();
        assert_eq!(own.class, Class::Private);
        // A name with a public and a private answer keeps only the public one.
        let kept = reach
            .filter(
                "cdn.example",
                vec![
                    "169.254.169.254:443".parse().unwrap(),
                    "1.2.3.4:443".parse().unwrap(),
                ],
            )
            .unwrap();
        assert_eq!(kept, ["1.2.3.4:443".parse::<SocketAddr>().unwrap()]);
    }

    #[test]
    fn an_image_name_never_vouches_for_its_own_inward_address() {
        // Literal loopback, private and link-local registries, and `localhost`: refused
        // before any connection, and never plain HTTP, unless the operator lists them.
        for (registry, class) in [
            ("127.0.0.1:5000", Class::Loopback),
            ("[::1]:5000", Class::Loopback),
            ("10.0.0.5:443", Class::Private),
            ("[fd00::1]", Class::Private),
            ("169.254.169.254", Class::LinkLocal),
        ] {
            let reach = Reach::new(registry, &[], &[]);
            assert!(!reach.own_http(), "{registry}");
            assert!(!reach.plain_http(registry), "{registry}");
            let blocked = reach.check_literal(registry).unwrap_err();
            assert_eq!(blocked.class, class, "{registry}");
            assert!(
                blocked.explain("its registry is at").contains(
                    "the planwright operator may list an internal registry in REGISTRY_PRIVATE"
                ),
                "{registry}"
            );
        }
        // Listed under another port, it is still not listed.
        let other_port = vec!["127.0.0.1:6000".to_owned()];
        let reach = Reach::new("127.0.0.1:5000", &other_port, &other_port);
        assert!(reach.check_literal("127.0.0.1:5000").is_err());
        assert!(!reach.own_http());
        let local = Reach::new("localhost:5000", &[], &[]);
        assert!(!local.plain_http("localhost:5000"));
        assert_eq!(
            local
                .filter("localhost", vec!["127.0.0.1:5000".parse().unwrap()])
                .unwrap_err()
                .class,
            Class::Loopback
        );
    }

    #[test]
    fn a_listed_loopback_registry_may_use_plain_http_to_itself_and_loopback_only() {
        for listed in ["127.0.0.1:5000", "127.0.0.1"] {
            let list = vec![listed.to_owned()];
            let reach = Reach::new("127.0.0.1:5000", &[], &list);
            assert!(reach.plain_http("127.0.0.1:5000"), "{listed}");
            assert!(reach.plain_http("127.0.0.1:6000"), "its token service");
            assert!(!reach.plain_http("localhost:5000"), "another host");
            assert!(!reach.plain_http("ghcr.io"));
            assert!(reach.check_literal("127.0.0.1:5000").is_ok());
            assert!(reach.check_literal("127.0.0.1:6000").is_ok());
            assert_eq!(
                reach.check_literal("169.254.169.254").unwrap_err().class,
                Class::LinkLocal
            );
            assert_eq!(
                reach.check_literal("10.0.0.5").unwrap_err().class,
                Class::Private
            );
            let blocked = reach
                .filter(
                    "metadata.example",
                    vec!["169.254.169.254:80".parse().unwrap()],
                )
                .unwrap_err();
            assert!(
                blocked
                    .explain("its token service is at")
                    .contains("metadata.example, which resolves to a link-local"),
                "{blocked}"
            );
        }
        let v6 = vec!["[::1]:5000".to_owned()];
        assert!(Reach::new("[::1]:5000", &[], &v6).plain_http("[::1]:5000"));
        // A listed private address is reached, but over HTTPS unless REGISTRY_INSECURE.
        let private = vec!["10.0.0.5:443".to_owned()];
        let reach = Reach::new("10.0.0.5:443", &[], &private);
        assert!(reach.check_literal("10.0.0.5:443").is_ok());
        assert!(!reach.plain_http("10.0.0.5:443"));
        assert!(Reach::new("10.0.0.5:443", &private, &[]).plain_http("10.0.0.5:443"));
    }

    #[test]
    fn listed_registries_are_vouched_for_and_lend_their_kind_of_address() {
        let insecure = vec!["registry.lan:5000".to_owned()];
        let private = vec!["registry.corp".to_owned()];
        let lan = Reach::new("registry.lan:5000", &insecure, &private);
        assert!(lan.plain_http("registry.lan:5000"));
        assert!(!Reach::new("registry.lan:6000", &insecure, &private).plain_http("registry.lan"));
        let corp = Reach::new("registry.corp", &insecure, &private);
        assert!(
            !corp.plain_http("registry.corp"),
            "private is not plain HTTP"
        );
        // Before the registry resolved, nothing inward is allowed for others.
        assert!(corp.check_literal("10.9.9.9").is_err());
        let own = vec!["10.0.0.7:443".parse().unwrap()];
        assert_eq!(corp.filter("registry.corp", own.clone()).unwrap(), own);
        assert!(corp.check_literal("10.9.9.9").is_ok(), "its storage");
        assert!(corp.check_literal("127.0.0.1").is_err());
        assert!(corp.check_literal("169.254.169.254").is_err());
        // `localhost` listed, as Docker allows it: plain HTTP, being loopback.
        let listed = vec!["localhost:5000".to_owned()];
        let local = Reach::new("localhost:5000", &[], &listed);
        assert!(local.plain_http("localhost:5000"));
        assert!(
            local
                .filter("localhost", vec!["127.0.0.1:5000".parse().unwrap()])
                .is_ok()
        );
    }

    struct Table(Vec<(&'static str, IpAddr)>);

    impl Resolve for Table {
        fn resolve(&self, name: Name) -> Resolving {
            let found: Vec<SocketAddr> = self
                .0
                .iter()
                .filter(|(host, _)| *host == name.as_str())
                .map(|(_, ip)| SocketAddr::new(*ip, 0))
                .collect();
            Box::pin(async move { Ok(Box::new(found.into_iter()) as Addrs) })
        }
    }

    #[tokio::test]
    async fn names_are_checked_by_what_they_resolve_to() {
        let guarded = Guarded {
            reach: Arc::new(Reach::new("registry.example", &[], &[])),
            lookup: Some(Arc::new(Table(vec![
                ("registry.example", ip("203.0.114.10")),
                ("inward.example", ip("10.0.0.5")),
            ]))),
        };
        let addrs: Vec<_> = guarded
            .resolve("registry.example".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert_eq!(addrs, ["203.0.114.10:0".parse::<SocketAddr>().unwrap()]);
        let Err(error) = guarded.resolve("inward.example".parse().unwrap()).await else {
            panic!("a name resolving to a private address is refused");
        };
        let blocked = cause::<Blocked>(error.as_ref()).expect("the refusal is in the chain");
        assert_eq!(
            (blocked.host.as_str(), blocked.class),
            ("inward.example", Class::Private)
        );
    }
}
