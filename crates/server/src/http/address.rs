//! The client's address, which the per-address limits count by: the connection's peer, or,
//! when the peer is a proxy the operator trusts (`HAGGLE_TRUSTED_PROXIES`), the address the
//! proxies say they forwarded the request for (`X-Forwarded-For`). From any other peer the
//! header is ignored, so that no client can choose the address it is counted by.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap};
use axum::middleware::Next;
use axum::response::Response;

use super::error::ApiError;

/// The addresses and networks of the proxies whose `X-Forwarded-For` is believed; none by
/// default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<Network>);

/// An address, or a network in CIDR notation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Network {
    base: IpAddr,
    bits: u8,
}

impl Network {
    fn contains(&self, address: IpAddr) -> bool {
        match (self.base, address) {
            (IpAddr::V4(base), IpAddr::V4(address)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(base) & mask == u32::from(address) & mask
            }
            (IpAddr::V6(base), IpAddr::V6(address)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.bits)).unwrap_or(0);
                u128::from(base) & mask == u128::from(address) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Network {
    type Err = String;

    fn from_str(value: &str) -> Result<Network, String> {
        let (address, bits) = match value.split_once('/') {
            Some((address, bits)) => (address, Some(bits)),
            None => (value, None),
        };
        let base = address
            .parse::<IpAddr>()
            .map_err(|_| format!("`{value}` is not an IP address or a network such as 10.0.0.0/8"))?
            .to_canonical();
        let most = if base.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => most,
            Some(bits) => bits
                .parse::<u8>()
                .ok()
                .filter(|bits| *bits <= most)
                .ok_or_else(|| format!("`{value}`: a prefix length is 0 to {most}"))?,
        };
        Ok(Network { base, bits })
    }
}

impl FromStr for TrustedProxies {
    type Err = String;

    /// A comma-separated list of addresses and networks (`10.0.0.0/8, 127.0.0.1, ::1`); an
    /// empty one trusts nobody.
    fn from_str(value: &str) -> Result<TrustedProxies, String> {
        value
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(Network::from_str)
            .collect::<Result<_, _>>()
            .map(TrustedProxies)
    }
}

impl TrustedProxies {
    /// Whether a peer at this address is a trusted proxy.
    pub fn trusts(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.0.iter().any(|network| network.contains(address))
    }

    /// The client a request from `peer` came from. Each proxy appends the address it received
    /// the request from to `X-Forwarded-For`, so the list is read from its end, as long as the
    /// hop that wrote the entry is trusted: the first address that is not a trusted proxy is the
    /// client's, and anything before it (which the client may have written itself) is ignored.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = peer.to_canonical();
        if self.0.is_empty() {
            return client;
        }
        let hops: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .flat_map(|value| value.to_str().unwrap_or_default().split(','))
            .collect();
        for hop in hops.into_iter().rev() {
            if !self.trusts(client) {
                break;
            }
            match parse_hop(hop.trim()) {
                Some(address) => client = address.to_canonical(),
                None => break,
            }
        }
        client
    }
}

/// One entry of `X-Forwarded-For`: an address, perhaps with a port.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>().ok().or_else(|| hop.parse::<SocketAddr>().ok().map(|socket| socket.ip()))
}

/// The address of the client a request came from (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddress(pub IpAddr);

impl ClientAddress {
    /// The client address a request's extensions carry: the one [`resolve`] found, or else
    /// the connection's peer.
    pub fn of(extensions: &Extensions) -> Option<ClientAddress> {
        extensions
            .get::<ClientAddress>()
            .copied()
            .or_else(|| extensions.get::<ConnectInfo<SocketAddr>>().map(|info| ClientAddress(info.0.ip())))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        ClientAddress::of(&parts.extensions).ok_or_else(ApiError::internal)
    }
}

/// Records each request's client address, for every limit and log that counts by it.
pub async fn resolve(State(trusted): State<Arc<TrustedProxies>>, mut request: Request, next: Next) -> Response {
    if let Some(ConnectInfo(peer)) = request.extensions().get::<ConnectInfo<SocketAddr>>().copied() {
        let client = trusted.client(peer.ip(), request.headers());
        request.extensions_mut().insert(ClientAddress(client));
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(value: &str) -> IpAddr {
        value.parse().unwrap()
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append("x-forwarded-for", value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn addresses_and_networks_parse_and_match() {
        let trusted: TrustedProxies = " 10.0.0.0/8, 192.168.1.7 ,fd00::/8,::1".parse().unwrap();
        for address in ["10.1.2.3", "192.168.1.7", "fd12::1", "::1", "::ffff:10.9.9.9"] {
            assert!(trusted.trusts(ip(address)), "{address}");
        }
        for address in ["11.0.0.1", "192.168.1.8", "fe80::1", "127.0.0.1"] {
            assert!(!trusted.trusts(ip(address)), "{address}");
        }
        assert_eq!("".parse::<TrustedProxies>().unwrap(), TrustedProxies::default());
        let everyone: TrustedProxies = "0.0.0.0/0".parse().unwrap();
        assert!(everyone.trusts(ip("203.0.113.9")) && !everyone.trusts(ip("2001:db8::1")));
        for wrong in ["10.0.0.0/33", "::/129", "localhost", "10.0.0.0/x", "10.0.0/8"] {
            assert!(wrong.parse::<TrustedProxies>().is_err(), "{wrong}");
        }
    }

    #[test]
    fn the_header_counts_only_from_a_trusted_peer() {
        let nobody = TrustedProxies::default();
        let proxy: TrustedProxies = "127.0.0.1".parse().unwrap();
        let headers = forwarded(&["203.0.113.7"]);
        assert_eq!(nobody.client(ip("127.0.0.1"), &headers), ip("127.0.0.1"));
        assert_eq!(proxy.client(ip("198.51.100.2"), &headers), ip("198.51.100.2"), "a forgery from an untrusted peer");
        assert_eq!(proxy.client(ip("127.0.0.1"), &headers), ip("203.0.113.7"));
        assert_eq!(proxy.client(ip("::ffff:127.0.0.1"), &headers), ip("203.0.113.7"));
        assert_eq!(proxy.client(ip("127.0.0.1"), &HeaderMap::new()), ip("127.0.0.1"), "the proxy's own request");
    }

    #[test]
    fn the_list_is_read_from_its_end_through_trusted_hops_only() {
        let proxies: TrustedProxies = "10.0.0.0/8".parse().unwrap();
        // The client wrote a first entry of its own; the proxies appended the rest.
        let headers = forwarded(&["1.1.1.1, 203.0.113.7", "10.0.0.5"]);
        assert_eq!(proxies.client(ip("10.0.0.2"), &headers), ip("203.0.113.7"));
        // Every entry a trusted proxy: the first one is as far as the list goes.
        assert_eq!(proxies.client(ip("10.0.0.2"), &forwarded(&["10.0.0.9, 10.0.0.5"])), ip("10.0.0.9"));
        // An entry that is not an address ends the walk at the last hop believed.
        assert_eq!(proxies.client(ip("10.0.0.2"), &forwarded(&["203.0.113.7, unknown"])), ip("10.0.0.2"));
        assert_eq!(proxies.client(ip("10.0.0.2"), &forwarded(&["203.0.113.7:4711"])), ip("203.0.113.7"));
        assert_eq!(proxies.client(ip("10.0.0.2"), &forwarded(&["[2001:db8::7]:4711"])), ip("2001:db8::7"));
    }
}
