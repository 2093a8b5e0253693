//! Where a webhook may point: an absolute http(s) URL whose host is, and resolves to, public
//! addresses only (unless the operator allows private ones, for development).
//!
//! The address is checked twice: when the webhook is created (so the owner hears of a mistake
//! at once), and on every delivery, by the delivery client's own resolver and a check of
//! literal addresses, so that a name re-pointed at an internal address later (DNS rebinding)
//! still reaches nothing internal.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

/// The longest URL accepted, in characters.
pub const MAX_URL_CHARS: usize = 2048;
/// How long resolving a webhook's host may take when it is created.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Checks the form of a webhook URL and returns it normalised.
pub fn parse_url(raw: &str) -> Result<Url, String> {
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain spaces or control characters".into());
    }
    if raw.chars().count() > MAX_URL_CHARS {
        return Err(format!("must be at most {MAX_URL_CHARS} characters"));
    }
    let url = Url::parse(raw).map_err(|_| "must be an absolute http or https URL".to_owned())?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("must use http or https, not `{}`", url.scheme()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must name a host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not contain a user name or password".into());
    }
    if url.fragment().is_some() {
        return Err("must not have a fragment (`#…`)".into());
    }
    if url.as_str().len() > MAX_URL_CHARS {
        return Err(format!("must be at most {MAX_URL_CHARS} characters once normalised"));
    }
    Ok(url)
}

/// Checks that the URL's host is, and resolves to, public addresses only. Without
/// `allow_private` a host that does not resolve is refused as well.
pub async fn check_reachable(url: &Url, allow_private: bool) -> Result<(), String> {
    if allow_private {
        return Ok(());
    }
    let refused = || "must not point at a loopback, private, link-local or otherwise internal address".to_owned();
    match url.host() {
        None => Err("must name a host".into()),
        Some(Host::Ipv4(ip)) => {
            if is_internal(IpAddr::V4(ip)) {
                Err(refused())
            } else {
                Ok(())
            }
        }
        Some(Host::Ipv6(ip)) => {
            if is_internal(IpAddr::V6(ip)) {
                Err(refused())
            } else {
                Ok(())
            }
        }
        Some(Host::Domain(name)) => {
            if is_local_name(name) {
                return Err(refused());
            }
            let port = url.port_or_known_default().unwrap_or(443);
            let addresses = match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((name, port))).await {
                Ok(Ok(addresses)) => addresses.collect::<Vec<_>>(),
                Ok(Err(_)) | Err(_) => Vec::new(),
            };
            if addresses.is_empty() {
                return Err(format!("the host `{name}` does not resolve"));
            }
            if addresses.iter().any(|address| is_internal(address.ip())) {
                return Err(refused());
            }
            Ok(())
        }
    }
}

/// `localhost` and its subdomains, which resolvers may answer without asking DNS.
fn is_local_name(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// The URL's host if it is a literal address that no delivery may reach.
pub fn internal_literal(url: &Url) -> Option<IpAddr> {
    let ip = match url.host()? {
        Host::Ipv4(ip) => IpAddr::V4(ip),
        Host::Ipv6(ip) => IpAddr::V6(ip),
        Host::Domain(_) => return None,
    };
    is_internal(ip).then_some(ip)
}

/// Whether an address is loopback, private, link-local, shared (CGNAT), unspecified,
/// broadcast, multicast, reserved, unique-local, or an IPv6 form of one of those.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => is_internal_v4(ip),
        IpAddr::V6(ip) => is_internal_v6(ip),
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()              // 127/8
        || ip.is_private()        // 10/8, 172.16/12, 192.168/16
        || ip.is_link_local()     // 169.254/16
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()      // 224/4
        || a == 0                 // "this network"
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT), 100.64/10
        || (a == 198 && (18..20).contains(&b)) // benchmarking, 198.18/15
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments, 192.0.0/24
        || a >= 240 // reserved, 240/4
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() {
        return true;
    }
    // Link-local fe80::/10, site-local fec0::/10 (deprecated), unique-local fc00::/7.
    if (segments[0] & 0xffc0) == 0xfe80 || (segments[0] & 0xffc0) == 0xfec0 || (segments[0] & 0xfe00) == 0xfc00 {
        return true;
    }
    // IPv4 addresses carried in IPv6: mapped ::ffff:a.b.c.d, compatible ::a.b.c.d, and the
    // NAT64 prefix 64:ff9b::/96 reach the IPv4 address they embed.
    if let Some(v4) = ip.to_ipv4() {
        return is_internal_v4(v4);
    }
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., a, b, c, d] = ip.octets();
        return is_internal_v4(Ipv4Addr::new(a, b, c, d));
    }
    // 6to4 (2002::/16) embeds an IPv4 address in its second and third groups; the local-use
    // NAT64 prefix 64:ff9b:1::/48 and IPv4-translated ::ffff:0:a.b.c.d are never public targets.
    if segments[0] == 0x2002 {
        let [_, _, a, b, c, d, ..] = ip.octets();
        return is_internal_v4(Ipv4Addr::new(a, b, c, d));
    }
    if segments[..3] == [0x64, 0xff9b, 1] || segments[..6] == [0, 0, 0, 0, 0xffff, 0] {
        return true;
    }
    false
}

/// The delivery client's resolver: the system's, with internal addresses dropped unless the
/// operator allows them. A name with nothing left fails to resolve.
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver {
    pub allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        let name = name.as_str().to_owned();
        Box::pin(async move {
            if !allow_private && is_local_name(&name) {
                return Err(refusal(&name).into());
            }
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> =
                resolved.into_iter().filter(|address| allow_private || !is_internal(address.ip())).collect();
            if allowed.is_empty() {
                return Err(refusal(&name).into());
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

fn refusal(name: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!("`{name}` resolves to no public address; private targets are not allowed"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_recognised() {
        for ip in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "febf::1",
            "fc00::1",
            "198.18.0.1",
            "192.0.0.8",
            "2002:7f00:1::",
            "2002:a00:1::1",
            "64:ff9b:1::a00:1",
            "::ffff:0:a00:1",
            "fd12:3456::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::10.0.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip} is internal");
        }
        for ip in [
            "93.184.215.14",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "2002:808:808::1",
            "198.20.0.1",
        ] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip} is public");
        }
    }

    #[test]
    fn urls_must_be_absolute_http_without_credentials_or_fragment() {
        assert_eq!(parse_url("https://example.com/hook?x=1").unwrap().as_str(), "https://example.com/hook?x=1");
        assert_eq!(parse_url("HTTP://Example.COM").unwrap().as_str(), "http://example.com/");
        for bad in [
            "example.com/hook",
            "/hook",
            "ftp://example.com/",
            "file:///etc/passwd",
            "http://user:pass@example.com/",
            "http://user@example.com/",
            "https://example.com/#top",
            "https://exa mple.com/",
            " https://example.com/",
            "https://example.com/\n",
            "http://",
            "",
        ] {
            assert!(parse_url(bad).is_err(), "{bad:?} is refused");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_CHARS));
        assert!(parse_url(&long).unwrap_err().contains("2048"));
    }

    #[tokio::test]
    async fn private_hosts_are_refused_unless_allowed() {
        for url in [
            "http://127.0.0.1/",
            "http://localhost:8080/",
            "http://LOCALHOST./",
            "http://api.localhost/",
            "http://[::1]/",
            "http://[::ffff:7f00:1]/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://10.0.0.1/",
            "http://169.254.169.254/latest/meta-data",
        ] {
            let url = parse_url(url).unwrap();
            assert!(check_reachable(&url, false).await.is_err(), "{url} is refused");
            assert!(check_reachable(&url, true).await.is_ok(), "{url} is allowed when private targets are");
        }
        let public = parse_url("https://93.184.215.14/hook").unwrap();
        assert!(check_reachable(&public, false).await.is_ok());
        assert!(internal_literal(&public).is_none());
        assert!(internal_literal(&parse_url("http://[fd00::1]/").unwrap()).is_some());
        let nowhere = parse_url("https://nowhere.invalid/").unwrap();
        assert!(check_reachable(&nowhere, false).await.unwrap_err().contains("does not resolve"));
    }

    #[tokio::test]
    async fn the_delivery_resolver_drops_internal_addresses() {
        let guarded = GuardedResolver { allow_private: false };
        assert!(guarded.resolve("localhost".parse().unwrap()).await.is_err());
        let open = GuardedResolver { allow_private: true };
        let addresses: Vec<SocketAddr> = open.resolve("localhost".parse().unwrap()).await.unwrap().collect();
        assert!(addresses.iter().all(|address| address.ip().is_loopback()) && !addresses.is_empty());
    }
}
