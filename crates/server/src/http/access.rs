//! Whom `/mcp` answers besides the API key: the `Host` values it serves and the browser origins
//! it answers (against DNS rebinding), as configured.

/// The `Host` names every instance answers on: its loopback addresses.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// Whom `/mcp` answers besides the API key: the `Host` values and browser origins.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// `Host` values served besides the loopback names and the address the server is bound to
    /// (`HAGGLE_MCP_ALLOWED_HOSTS`: `name` or `name:port`); `*` serves any.
    pub hosts: Vec<String>,
    /// Browser origins answered (`HAGGLE_MCP_ALLOWED_ORIGINS`: `scheme://host:port`); none by
    /// default. A request without `Origin` (not from a browser page) is answered regardless.
    pub origins: Vec<String>,
}

impl Access {
    /// The `Host` values served by an instance whose own API is at `loopback` (empty: any).
    pub(super) fn served_hosts(&self, loopback: &str) -> Vec<String> {
        if self.hosts.iter().any(|host| host.trim() == "*") {
            return Vec::new();
        }
        let bound = url::Url::parse(loopback).ok().and_then(|url| url.host_str().map(str::to_owned));
        LOOPBACK_HOSTS
            .into_iter()
            .map(str::to_owned)
            .chain(bound)
            .chain(self.hosts.iter().map(|host| host.trim().to_owned()).filter(|host| !host.is_empty()))
            .collect()
    }
}
