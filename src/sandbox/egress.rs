//! The setup phase's way out: an HTTP proxy on a host Unix socket (bridged into the sandbox)
//! that tunnels `CONNECT host:port` and forwards plain `http://` requests to the hosts of a
//! domain [`Allowlist`] only, and logs every connection it allows or denies.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_util::sync::CancellationToken;

/// The loopback port the egress proxy appears on inside a sandbox.
pub const PORT: u16 = 3128;

/// Largest request head the proxy reads; package managers send a few hundred bytes.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its request head, and the proxy to reach a host.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The hosts a setup phase may reach. Entries: `example.com` (that host), `*.example.com`
/// (its subdomains), `.example.com` (the host and its subdomains), an IP address, each with
/// an optional `:port`. Without a port an entry allows 80 and 443 only.
///
/// Names must resolve to public addresses: a loopback, private, link-local or otherwise
/// special address is used only when the allowlist lists that address itself, or when the
/// entry is `localhost` by name (which names the loopback addresses).
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    host: HostRule,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostRule {
    Exact(String),
    Subdomains(String),
    DomainAndSubdomains(String),
    Ip(IpAddr),
}

impl Allowlist {
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self> {
        let entries = entries
            .iter()
            .map(|e| parse_entry(e.as_ref()))
            .collect::<Result<_>>()?;
        Ok(Allowlist { entries })
    }

    fn port_allowed(entry: &Entry, port: u16) -> bool {
        match entry.port {
            Some(p) => p == port,
            None => port == 80 || port == 443,
        }
    }

    /// Whether `addr:port` is listed by address.
    fn lists_address(&self, addr: IpAddr, port: u16) -> bool {
        self.entries
            .iter()
            .any(|e| e.host == HostRule::Ip(addr) && Self::port_allowed(e, port))
    }

    /// The first check, before any DNS: is `host:port` listed at all? `host` is normalised.
    fn decide(&self, host: &str, port: u16) -> Result<Target, String> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            if self.lists_address(ip, port) {
                return Ok(Target::Address(ip));
            }
            return Err(format!("{} is not in the allowlist", authority(host, port)));
        }
        let matching: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| match &e.host {
                HostRule::Exact(h) => h == host,
                HostRule::Subdomains(s) => is_subdomain(host, s),
                HostRule::DomainAndSubdomains(s) => host == s || is_subdomain(host, s),
                HostRule::Ip(_) => false,
            })
            .collect();
        if matching.is_empty() {
            return Err(format!("{host} is not in the allowlist"));
        }
        let Some(entry) = matching.iter().find(|e| Self::port_allowed(e, port)) else {
            return Err(format!("port {port} of {host} is not in the allowlist"));
        };
        Ok(Target::Name {
            host: host.to_owned(),
            loopback_named: host == "localhost" && entry.host == HostRule::Exact(host.into()),
        })
    }

    /// Of the addresses `target` resolved to, those the proxy may connect to.
    fn usable(&self, addrs: &[IpAddr], port: u16, loopback_named: bool) -> Vec<IpAddr> {
        addrs
            .iter()
            .copied()
            .filter(|a| {
                is_public(*a) || self.lists_address(*a, port) || (loopback_named && is_loopback(*a))
            })
            .collect()
    }
}

enum Target {
    Address(IpAddr),
    Name { host: String, loopback_named: bool },
}

fn parse_entry(raw: &str) -> Result<Entry> {
    let entry = raw.trim().to_ascii_lowercase();
    let bad = |why: &str| anyhow::anyhow!("Cannot use `{raw}` in the network allowlist: {why}");
    if entry.is_empty() {
        return Err(bad("it is empty"));
    }
    let (host, port) = split_authority(&entry).map_err(|e| bad(&e))?;
    let host = host.trim_end_matches('.');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(Entry {
            host: HostRule::Ip(ip),
            port,
        });
    }
    let (rule, name): (fn(String) -> HostRule, &str) = if let Some(s) = host.strip_prefix("*.") {
        (HostRule::Subdomains, s)
    } else if let Some(s) = host.strip_prefix('.') {
        (HostRule::DomainAndSubdomains, s)
    } else {
        (HostRule::Exact, host)
    };
    let valid_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if name.is_empty() || !name.split('.').all(valid_label) {
        return Err(bad(
            "expected a host name, `*.domain`, `.domain` or an IP address",
        ));
    }
    Ok(Entry {
        host: rule(name.to_owned()),
        port,
    })
}

/// Splits `host[:port]` or `[v6][:port]`; a bare IPv6 address has no port.
fn split_authority(s: &str) -> Result<(&str, Option<u16>), String> {
    let parse_port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("`{p}` is not a port"))
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "an IPv6 address lacks its `]`".to_owned())?;
        return match after {
            "" => Ok((host, None)),
            p => match p.strip_prefix(':') {
                Some(p) => Ok((host, Some(parse_port(p)?))),
                None => Err(format!("unexpected `{p}` after the address")),
            },
        };
    }
    if s.parse::<Ipv6Addr>().is_ok() {
        return Ok((s, None));
    }
    match s.rsplit_once(':') {
        Some((host, p)) => Ok((host, Some(parse_port(p)?))),
        None => Ok((s, None)),
    }
}

fn is_subdomain(host: &str, domain: &str) -> bool {
    host.len() > domain.len() + 1
        && host.ends_with(domain)
        && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
}

fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn is_loopback(addr: IpAddr) -> bool {
    match canonical(addr) {
        IpAddr::V4(a) => a.is_loopback(),
        IpAddr::V6(a) => a.is_loopback(),
    }
}

/// IPv4 addresses carried in IPv6 (mapped, NAT64) are judged as IPv4.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let s = v6.segments();
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [a, b, c, d, ..] = v6.octets()[12..] else {
                    return addr;
                };
                return IpAddr::V4(Ipv4Addr::new(a, b, c, d));
            }
            addr
        }
        v4 => v4,
    }
}

/// Addresses on the public internet; everything else (this host, the local networks, the
/// cloud metadata service on link-local, multicast, reserved ranges) is not.
fn is_public(addr: IpAddr) -> bool {
    match canonical(addr) {
        IpAddr::V4(a) => {
            let [o0, o1, o2, _] = a.octets();
            !(a.is_loopback()
                || a.is_private()
                || a.is_link_local()
                || a.is_unspecified()
                || a.is_broadcast()
                || a.is_multicast()
                || a.is_documentation()
                || o0 == 0
                || o0 >= 240
                // Shared address space (carrier-grade NAT), 100.64.0.0/10.
                || (o0 == 100 && (64..128).contains(&o1))
                // Benchmarking, 198.18.0.0/15, and IETF protocol assignments, 192.0.0.0/24.
                || (o0 == 198 && (o1 == 18 || o1 == 19))
                || (o0 == 192 && o1 == 0 && o2 == 0))
        }
        IpAddr::V6(a) => {
            let s0 = a.segments()[0];
            !(a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                // Unique local fc00::/7, link-local fe80::/10, site-local fec0::/10.
                || (s0 & 0xfe00) == 0xfc00
                || (s0 & 0xffc0) == 0xfe80
                || (s0 & 0xffc0) == 0xfec0
                // Documentation, 2001:db8::/32.
                || (s0 == 0x2001 && a.segments()[1] == 0x0db8))
        }
    }
}

/// A running egress proxy. It stops, and removes its socket, when dropped.
pub struct EgressProxy {
    socket: PathBuf,
    stop: CancellationToken,
}

impl EgressProxy {
    /// Listens on the Unix socket `socket` (which must not exist yet; any length, see
    /// [`crate::unix_socket`]) for the run named `run` (in every log line). Only sandboxes may
    /// connect (see [`super::host_users::open_to_sandboxes`]).
    pub async fn start(socket: &Path, allowlist: Allowlist, run: &str) -> Result<Self> {
        let listener = crate::unix_socket::bind(socket)
            .with_context(|| format!("Could not listen on {}", socket.display()))?;
        super::host_users::open_to_sandboxes(socket)
            .with_context(|| format!("Could not open {} to the sandbox", socket.display()))?;
        let stop = CancellationToken::new();
        let shared = Arc::new(Shared {
            allowlist,
            run: run.to_owned(),
        });
        let stopped = stop.clone();
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(e) => {
                            tracing::warn!(run = %shared.run, "egress proxy: Could not accept a connection: {e}");
                            continue;
                        }
                    },
                    () = stopped.cancelled() => break,
                };
                let shared = shared.clone();
                let stopped = stopped.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        () = shared.handle(stream) => {}
                        () = stopped.cancelled() => {}
                    }
                });
            }
        });
        Ok(EgressProxy {
            socket: socket.to_owned(),
            stop,
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.stop.cancel();
        let _ = std::fs::remove_file(&self.socket);
    }
}

struct Shared {
    allowlist: Allowlist,
    run: String,
}

/// A parsed request head.
struct Request {
    method: String,
    host: String,
    port: u16,
    /// For forwarded requests: the head rewritten for the origin server.
    forward: Option<Vec<u8>>,
}

impl Shared {
    async fn handle(&self, mut client: UnixStream) {
        let (head, rest) = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
            Ok(Ok(read)) => read,
            Ok(Err(e)) => {
                let _ = respond(&mut client, 400, &format!("{e:#}")).await;
                return;
            }
            Err(_) => return,
        };
        let request = match parse_request(&head) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(run = %self.run, verdict = "deny", "egress: {e:#}");
                let _ = respond(&mut client, 400, &format!("{e:#}")).await;
                return;
            }
        };
        let (host, port) = (request.host.as_str(), request.port);
        let upstream = match self.connect(host, port).await {
            Ok(upstream) => upstream,
            Err(Refusal::Denied(reason)) => {
                tracing::warn!(run = %self.run, host, port, method = %request.method, verdict = "deny", %reason, "egress denied");
                let _ = respond(&mut client, 403, &reason).await;
                return;
            }
            Err(Refusal::Unreachable(reason)) => {
                tracing::warn!(run = %self.run, host, port, method = %request.method, verdict = "allow", %reason, "egress failed");
                let _ = respond(&mut client, 502, &reason).await;
                return;
            }
        };
        let (mut upstream, addr) = upstream;
        tracing::info!(run = %self.run, host, port, method = %request.method, address = %addr, verdict = "allow", "egress allowed");
        let opened = match &request.forward {
            None => client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_ok(),
            Some(head) => upstream.write_all(head).await.is_ok(),
        };
        if !opened || (!rest.is_empty() && upstream.write_all(&rest).await.is_err()) {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }

    /// Checks `host:port` against the allowlist, resolves it on the host, and connects to
    /// the first usable address.
    async fn connect(&self, host: &str, port: u16) -> Result<(TcpStream, SocketAddr), Refusal> {
        let addrs: Vec<IpAddr> = match self.allowlist.decide(host, port) {
            Err(reason) => return Err(Refusal::Denied(reason)),
            Ok(Target::Address(ip)) => vec![ip],
            Ok(Target::Name {
                host,
                loopback_named,
            }) => {
                let resolved: Vec<IpAddr> = tokio::net::lookup_host((host.as_str(), port))
                    .await
                    .map_err(|e| Refusal::Unreachable(format!("Could not resolve {host}: {e}")))?
                    .map(|a| a.ip())
                    .collect();
                let usable = self.allowlist.usable(&resolved, port, loopback_named);
                if usable.is_empty() {
                    let list = resolved
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(Refusal::Denied(format!(
                        "{host} resolves to non-public addresses ({list}) that the allowlist does not name"
                    )));
                }
                usable
            }
        };
        let mut last = String::new();
        for ip in addrs {
            let addr = SocketAddr::new(ip, port);
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => return Ok((stream, addr)),
                Ok(Err(e)) => last = format!("Could not connect to {addr}: {e}"),
                Err(_) => last = format!("Could not connect to {addr}: timed out"),
            }
        }
        Err(Refusal::Unreachable(last))
    }
}

enum Refusal {
    Denied(String),
    Unreachable(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Denied(r) | Refusal::Unreachable(r) => f.write_str(r),
        }
    }
}

/// Reads up to the blank line ending the head; returns the head and whatever followed it.
async fn read_head(stream: &mut UnixStream) -> Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            bail!("Cannot read the request: its head is over {MAX_HEAD} bytes");
        }
        let n = stream
            .read(&mut chunk)
            .await
            .context("Could not read the request")?;
        if n == 0 {
            bail!("Cannot read the request: the connection closed before its end");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Headers that concern the hop to the proxy, not the origin server.
const HOP_HEADERS: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
];

fn parse_request(head: &[u8]) -> Result<Request> {
    let text = std::str::from_utf8(head).context("Cannot read the request: it is not text")?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        bail!("Cannot read the request line `{line}`");
    };
    if !version.starts_with("HTTP/1.") {
        bail!("Cannot proxy {version}: only HTTP/1.x");
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(target)
            .map_err(|e| anyhow::anyhow!("Cannot connect to `{target}`: {e}"))?;
        let port = port.with_context(|| format!("Cannot connect to `{target}`: no port"))?;
        return Ok(Request {
            method: "CONNECT".into(),
            host: normalise_host(host),
            port,
            forward: None,
        });
    }
    let Some(rest) = target
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &target[7..])
    else {
        bail!(
            "Cannot forward `{method} {target}`: expected an absolute http:// URL (https goes through CONNECT)"
        );
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_owned()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_owned()),
    };
    if authority.contains('@') {
        bail!("Cannot forward a URL with credentials in it");
    }
    let (host, port) = split_authority(authority)
        .map_err(|e| anyhow::anyhow!("Cannot forward to `{authority}`: {e}"))?;
    let mut forward = format!("{method} {path} {version}\r\n");
    let mut has_host = false;
    for header in lines.filter(|l| !l.is_empty()) {
        let name = header.split(':').next().unwrap_or_default().trim();
        if HOP_HEADERS.iter().any(|h| name.eq_ignore_ascii_case(h)) {
            continue;
        }
        has_host |= name.eq_ignore_ascii_case("host");
        forward.push_str(header);
        forward.push_str("\r\n");
    }
    if !has_host {
        forward.push_str(&format!("Host: {authority}\r\n"));
    }
    // One request per connection: a kept-alive one could carry a next request for
    // another host to this server, and the proxy would never check it.
    forward.push_str("Connection: close\r\n\r\n");
    Ok(Request {
        method: method.to_owned(),
        host: normalise_host(host),
        port: port.unwrap_or(80),
        forward: Some(forward.into_bytes()),
    })
}

fn normalise_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

async fn respond(stream: &mut UnixStream, status: u16, reason: &str) -> std::io::Result<()> {
    let title = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let body = format!(
        "planwright egress proxy: {}\n",
        reason.replace(['\r', '\n'], " ")
    );
    let head = format!(
        "HTTP/1.1 {status} {title}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Allowlist {
        Allowlist::parse(entries).unwrap()
    }

    fn allowed(list: &Allowlist, host: &str, port: u16) -> bool {
        list.decide(host, port).is_ok()
    }

    #[test]
    fn entries_match_hosts_and_ports() {
        let l = list(&[
            "crates.io",
            "*.crates.io",
            ".pypi.org",
            "registry.local:8443",
            "127.0.0.1:4873",
            "[::1]:4874",
        ]);
        assert!(allowed(&l, "crates.io", 443));
        assert!(allowed(&l, "crates.io", 80));
        assert!(!allowed(&l, "crates.io", 22));
        assert!(allowed(&l, "static.crates.io", 443));
        assert!(!allowed(&l, "evilcrates.io", 443));
        assert!(!allowed(&l, "crates.io.evil.com", 443));
        assert!(allowed(&l, "pypi.org", 443));
        assert!(allowed(&l, "files.pypi.org", 443));
        assert!(allowed(&l, "registry.local", 8443));
        assert!(!allowed(&l, "registry.local", 443));
        assert!(allowed(&l, "127.0.0.1", 4873));
        assert!(!allowed(&l, "127.0.0.1", 80));
        assert!(allowed(&l, "::1", 4874));
        assert!(!allowed(&l, "169.254.169.254", 80));
        assert!(!allowed(&l, "github.com", 443));
    }

    #[test]
    fn a_wildcard_does_not_cover_the_domain_itself() {
        let l = list(&["*.crates.io"]);
        assert!(!allowed(&l, "crates.io", 443));
    }

    #[test]
    fn bad_entries_are_refused_by_name() {
        for bad in [
            "",
            "crates.io:0",
            "crates.io:http",
            "a b",
            "*.",
            "[::1",
            "x/y",
        ] {
            let err = Allowlist::parse(&[bad]).unwrap_err().to_string();
            assert!(err.starts_with("Cannot use"), "{err}");
        }
    }

    #[test]
    fn only_named_special_addresses_are_usable() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let public: IpAddr = "151.101.1.1".parse().unwrap();
        let metadata: IpAddr = "169.254.169.254".parse().unwrap();
        let l = list(&["localhost:4873", ".example.com", "10.1.2.3"]);
        assert_eq!(l.usable(&[loopback, public], 443, false), vec![public]);
        assert_eq!(l.usable(&[loopback], 4873, true), vec![loopback]);
        assert!(l.usable(&[metadata], 80, false).is_empty());
        let private: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(l.usable(&[private], 443, false), vec![private]);
        assert!(l.usable(&[private], 8080, false).is_empty());
        let Ok(Target::Name { loopback_named, .. }) = l.decide("localhost", 4873) else {
            panic!("localhost:4873 is listed");
        };
        assert!(loopback_named);
    }

    #[test]
    fn special_addresses_are_not_public() {
        for addr in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!is_public(addr.parse().unwrap()), "{addr}");
        }
        for addr in ["151.101.1.1", "2a04:4e42::1"] {
            assert!(is_public(addr.parse().unwrap()), "{addr}");
        }
    }

    #[test]
    fn forwarded_requests_lose_proxy_headers_and_keep_alive() {
        let head = b"GET http://Example.com:8080/a?b=1 HTTP/1.1\r\nHost: example.com:8080\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nAccept: */*\r\n\r\n";
        let r = parse_request(head).unwrap();
        assert_eq!((r.host.as_str(), r.port), ("example.com", 8080));
        let forward = String::from_utf8(r.forward.unwrap()).unwrap();
        assert_eq!(
            forward,
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let r = parse_request(b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((r.host.as_str(), r.port, r.forward), ("::1", 443, None));
        assert!(parse_request(b"GET /relative HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_request(b"CONNECT example.com HTTP/1.1\r\n\r\n").is_err());
    }
}
