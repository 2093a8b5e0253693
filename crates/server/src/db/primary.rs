//! Following the primary among several database servers. `DATABASE_URL` may name several hosts,
//! as libpq does (`postgres://h1:5432,h2:5432/haggle?target_session_attrs=read-write`); sqlx
//! connects to one host, so Haggle finds the one that accepts writes itself: it asks each host
//! in turn whether its sessions are read-only (a standby's are), points its pools at the first
//! that is not, and keeps asking that one every [`CHECK_EVERY`]. When it stops answering, or
//! turns read-only (a switchover), the hosts are asked again and the pools follow the new
//! primary; the event listener, which opens its connection with the main pool's options,
//! follows with them. Every new connection of a following pool is checked too, so that none is
//! used on a standby: while no host accepts writes, no connection is made, and requests are
//! answered `503` with `Retry-After`, as when the database is down.

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How often the current primary is asked whether it still accepts writes.
pub const CHECK_EVERY: Duration = Duration::from_millis(500);
/// How long a host has to connect and answer before it counts as unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One host of `DATABASE_URL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub port: u16,
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.name.contains(':') {
            write!(f, "[{}]:{}", self.name, self.port)
        } else {
            write!(f, "{}:{}", self.name, self.port)
        }
    }
}

/// `DATABASE_URL`, read: the options for its first host, and its hosts when it names several
/// or asks for one that accepts writes (`target_session_attrs=read-write` or `primary`).
#[derive(Debug, Clone)]
pub struct DatabaseUrl {
    pub options: PgConnectOptions,
    /// Empty: connect to the one host as given, without asking whether it is the primary.
    pub hosts: Vec<Host>,
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<DatabaseUrl, String> {
        let (scheme, rest) = url.split_once("://").ok_or("not a URL (postgres://...)")?;
        if !matches!(scheme, "postgres" | "postgresql") {
            return Err(format!("the scheme is {scheme}, not postgres"));
        }
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, host_list) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let (tail, session_attrs) = take_session_attrs(tail);
        let wants_writes = match session_attrs.as_deref() {
            None | Some("any") => false,
            Some("read-write" | "primary") => true,
            Some(other) => {
                return Err(format!(
                    "target_session_attrs={other} is not supported: Haggle writes, so it takes read-write \
                     (or primary), or any"
                ));
            }
        };
        let hosts = if host_list.is_empty() {
            Vec::new()
        } else {
            host_list.split(',').map(parse_host).collect::<Result<Vec<Host>, String>>()?
        };
        let first = match hosts.first() {
            Some(host) => format!("{scheme}://{userinfo}{host}{tail}"),
            // A socket directory in the query after no host (`postgres://u@/haggle?host=/dir`, as
            // libpq reads it): the URL's parser wants a host beside a user, so one stands in
            // until the query's `host` takes its place.
            None if !userinfo.is_empty() && names_socket(&tail) => format!("{scheme}://{userinfo}localhost{tail}"),
            None => format!("{scheme}://{userinfo}{tail}"),
        };
        let options = PgConnectOptions::from_str(&first).map_err(|error| error.to_string())?;
        let hosts = if hosts.len() > 1 || wants_writes { hosts } else { Vec::new() };
        if wants_writes && hosts.is_empty() {
            return Err("target_session_attrs needs a host in the URL (a socket directory is not supported)".into());
        }
        Ok(DatabaseUrl { options, hosts })
    }
}

/// The query without `target_session_attrs` (sqlx does not know it), and its value.
fn take_session_attrs(tail: &str) -> (String, Option<String>) {
    let Some((path, query)) = tail.split_once('?') else {
        return (tail.to_owned(), None);
    };
    let mut found = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some(("target_session_attrs", value)) => {
                found = Some(value.to_owned());
                false
            }
            _ => !pair.is_empty(),
        })
        .collect();
    if kept.is_empty() { (path.to_owned(), found) } else { (format!("{path}?{}", kept.join("&")), found) }
}

/// Whether the URL's query names a socket directory as its host (`host=/dir`, or `%2F` encoded).
fn names_socket(tail: &str) -> bool {
    tail.split_once('?').is_some_and(|(_, query)| {
        query.split('&').any(|pair| {
            pair.strip_prefix("host=")
                .is_some_and(|dir| dir.starts_with('/') || dir.to_ascii_lowercase().starts_with("%2f"))
        })
    })
}

fn parse_host(text: &str) -> Result<Host, String> {
    let (name, port) = if let Some(bracketed) = text.strip_prefix('[') {
        let (name, after) = bracketed.split_once(']').ok_or_else(|| format!("{text}: an unclosed [ in a host"))?;
        (name, after.strip_prefix(':'))
    } else {
        match text.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (text, None),
        }
    };
    if name.is_empty() {
        return Err(format!("an empty host in the list of hosts ({text:?})"));
    }
    let port = match port {
        Some(port) => port.parse().map_err(|_| format!("{text}: the port is not a number from 1 to 65535"))?,
        None => 5432,
    };
    Ok(Host { name: name.to_owned(), port })
}

/// Why a host is not the primary.
#[derive(Debug)]
pub enum NotPrimary {
    Unreachable(String),
    /// It answers, but its sessions are read-only: a standby (or a server made read-only).
    ReadOnly,
}

impl std::fmt::Display for NotPrimary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotPrimary::Unreachable(error) => write!(f, "unreachable ({error})"),
            NotPrimary::ReadOnly => f.write_str("accepts no writes (a standby)"),
        }
    }
}

/// The primary among `DATABASE_URL`'s hosts, and the pools that follow it.
#[derive(Clone)]
pub struct Primary {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Primary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Primary").field("hosts", &self.inner.hosts).field("current", &self.current()).finish()
    }
}

struct Inner {
    options: PgConnectOptions,
    hosts: Vec<Host>,
    current: Mutex<Option<usize>>,
    pools: Mutex<Vec<PgPool>>,
    /// A pool's new connection found a standby: ask the hosts again now.
    suspect: Notify,
}

impl Primary {
    /// `None` when the URL names one host without asking for writes: then Haggle connects as
    /// given and asks nothing.
    pub fn new(url: &DatabaseUrl) -> Option<Primary> {
        if url.hosts.is_empty() {
            return None;
        }
        Some(Primary {
            inner: Arc::new(Inner {
                options: url.options.clone(),
                hosts: url.hosts.clone(),
                current: Mutex::new(None),
                pools: Mutex::new(Vec::new()),
                suspect: Notify::new(),
            }),
        })
    }

    pub fn hosts(&self) -> &[Host] {
        &self.inner.hosts
    }

    /// The primary as last found.
    pub fn current(&self) -> Option<Host> {
        let current = *self.inner.current.lock().expect("primary lock");
        current.map(|index| self.inner.hosts[index].clone())
    }

    /// The options for the primary as last found (the first host before any was).
    pub fn connect_options(&self) -> PgConnectOptions {
        let index = self.inner.current.lock().expect("primary lock").unwrap_or(0);
        on_host(self.inner.options.clone(), &self.inner.hosts[index])
    }

    /// Asks each host in turn; the first that accepts writes becomes the primary, and every
    /// following pool's new connections go to it. Gives why each host was passed over.
    pub async fn find(&self) -> Result<Host, Vec<(Host, NotPrimary)>> {
        let mut passed = Vec::new();
        for (index, host) in self.inner.hosts.iter().enumerate() {
            match probe(on_host(self.inner.options.clone(), host)).await {
                Ok(_) => {
                    self.point_at(index, &passed);
                    return Ok(host.clone());
                }
                Err(why) => passed.push((host.clone(), why)),
            }
        }
        *self.inner.current.lock().expect("primary lock") = None;
        Err(passed)
    }

    /// Waits up to `patience` for a primary, asking every second.
    pub async fn wait_for(&self, patience: Duration) -> Result<Host, String> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            match self.find().await {
                Ok(host) => return Ok(host),
                Err(passed) => {
                    let why = describe(&passed);
                    if tokio::time::Instant::now() >= deadline {
                        return Err(format!("no host of DATABASE_URL accepts writes: {why}"));
                    }
                    tracing::warn!(hosts = %why, "no host of DATABASE_URL accepts writes yet; asking again in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Pool options whose every new connection is checked to accept writes: one on a standby
    /// is closed (and the pool tries again until its acquire time-out, then the request is
    /// answered 503), and the hosts are asked again at once.
    pub fn checked(&self, options: PgPoolOptions) -> PgPoolOptions {
        let primary = self.clone();
        options.after_connect(move |conn, _| {
            let primary = primary.clone();
            Box::pin(async move {
                if accepts_writes(conn).await? {
                    return Ok(());
                }
                primary.inner.suspect.notify_one();
                Err(sqlx::Error::Protocol("the server accepts no writes (a standby): waiting for the primary".into()))
            })
        })
    }

    /// A pool on the primary, which follows it from one host to another.
    pub async fn connect(&self, max_connections: u32) -> Result<PgPool, sqlx::Error> {
        let options = super::session_settings(self.connect_options());
        let pool = self.checked(super::pool_options(max_connections)).connect_with(options).await?;
        self.attach(&pool);
        Ok(pool)
    }

    /// Makes `pool` follow the primary: its new connections go to the primary from now on.
    pub fn attach(&self, pool: &PgPool) {
        let index = self.inner.current.lock().expect("primary lock").unwrap_or(0);
        pool.set_connect_options(on_host(pool.connect_options().as_ref().clone(), &self.inner.hosts[index]));
        self.inner.pools.lock().expect("primary lock").push(pool.clone());
    }

    /// Points the pools at host `index`, logging the hosts passed over when it is a change.
    fn point_at(&self, index: usize, passed: &[(Host, NotPrimary)]) {
        let previous = self.inner.current.lock().expect("primary lock").replace(index);
        if previous == Some(index) {
            return;
        }
        for (other, why) in passed {
            tracing::warn!(host = %other, reason = %why, "a host of DATABASE_URL is not the primary");
        }
        let host = &self.inner.hosts[index];
        match previous {
            Some(previous) => tracing::warn!(
                from = %self.inner.hosts[previous],
                to = %host,
                "the primary moved; following it"
            ),
            None => tracing::info!(%host, "the primary of DATABASE_URL"),
        }
        for pool in self.inner.pools.lock().expect("primary lock").iter() {
            pool.set_connect_options(on_host(pool.connect_options().as_ref().clone(), host));
        }
        // Connections idle to the old primary are dead or read-only: check each before use.
        super::suspect_idle_connections();
    }

    /// Until cancelled: asks the primary every [`CHECK_EVERY`] whether it still accepts writes,
    /// over a connection of its own, and when it does not (or a pool found a standby), asks
    /// every host again.
    pub async fn follow(self, shutdown: CancellationToken) {
        let mut watch: Option<PgConnection> = None;
        let mut missing_since: Option<tokio::time::Instant> = None;
        let mut tick = tokio::time::interval(CHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let suspect = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => false,
                _ = self.inner.suspect.notified() => true,
            };
            if !suspect && let Some(conn) = watch.as_mut() {
                match tokio::time::timeout(PROBE_TIMEOUT, accepts_writes(conn)).await {
                    Ok(Ok(true)) => continue,
                    Ok(Ok(false)) => tracing::warn!("the primary accepts no more writes; looking for the new one"),
                    _ => tracing::warn!("the primary stopped answering; looking for the new one"),
                }
            }
            if let Some(conn) = watch.take() {
                let _ = tokio::time::timeout(PROBE_TIMEOUT, conn.close()).await;
            }
            match self.find().await {
                Ok(host) => {
                    if let Some(since) = missing_since.take() {
                        tracing::warn!(%host, after = ?since.elapsed(), "found the primary again");
                    }
                    watch = probe(on_host(self.inner.options.clone(), &host)).await.ok();
                }
                Err(passed) => {
                    if missing_since.is_none() {
                        missing_since = Some(tokio::time::Instant::now());
                        tracing::error!(
                            hosts = %describe(&passed),
                            "no host of DATABASE_URL accepts writes: moves are answered 503 until one does"
                        );
                    }
                }
            }
        }
    }
}

fn describe(passed: &[(Host, NotPrimary)]) -> String {
    passed.iter().map(|(host, why)| format!("{host} {why}")).collect::<Vec<_>>().join("; ")
}

fn on_host(options: PgConnectOptions, host: &Host) -> PgConnectOptions {
    options.host(&host.name).port(host.port)
}

/// A connection to the host if it accepts writes.
async fn probe(options: PgConnectOptions) -> Result<PgConnection, NotPrimary> {
    let options = options.application_name("haggle-primary-check").disable_statement_logging();
    let attempt = async {
        let mut conn = PgConnection::connect_with(&options).await?;
        let writes = accepts_writes(&mut conn).await?;
        Ok::<_, sqlx::Error>((conn, writes))
    };
    match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
        Ok(Ok((conn, true))) => Ok(conn),
        Ok(Ok((conn, false))) => {
            let _ = conn.close().await;
            Err(NotPrimary::ReadOnly)
        }
        Ok(Err(error)) => Err(NotPrimary::Unreachable(error.to_string())),
        Err(_) => Err(NotPrimary::Unreachable(format!("no answer within {PROBE_TIMEOUT:?}"))),
    }
}

/// What libpq's `target_session_attrs=read-write` asks: whether the session's transactions are
/// read-write by default. A standby's never are.
async fn accepts_writes(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let read_only: String = sqlx::query_scalar("SHOW transaction_read_only").fetch_one(conn).await?;
    Ok(read_only == "off")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_host_is_connected_to_as_given() {
        let url = DatabaseUrl::parse("postgres://u:p@db.example:6543/haggle?sslmode=disable").unwrap();
        assert!(url.hosts.is_empty());
        assert_eq!((url.options.get_host(), url.options.get_port()), ("db.example", 6543));
        assert_eq!(url.options.get_database(), Some("haggle"));
    }

    #[test]
    fn a_socket_directory_is_connected_to_as_libpq_reads_it() {
        for url in [
            "postgres://haggle:secret@/haggle?host=/var/run/postgresql",
            "postgresql://haggle@/haggle?sslmode=disable&host=%2Fvar%2Frun%2Fpostgresql",
            "postgres://haggle@%2Fvar%2Frun%2Fpostgresql/haggle",
            "postgres:///haggle?host=/var/run/postgresql&user=haggle",
        ] {
            let parsed = DatabaseUrl::parse(url).unwrap_or_else(|error| panic!("{url}: {error}"));
            assert!(parsed.hosts.is_empty(), "{url}");
            let socket = parsed.options.get_socket().map(|dir| dir.display().to_string());
            assert_eq!(socket.as_deref(), Some("/var/run/postgresql"), "{url}");
            assert_eq!((parsed.options.get_username(), parsed.options.get_database()), ("haggle", Some("haggle")));
        }
    }

    #[test]
    fn several_hosts_are_followed_with_the_first_as_the_template() {
        let url = DatabaseUrl::parse(
            "postgresql://u:p%40ss@h1:5433,h2,[::1]:5435/haggle?target_session_attrs=read-write&sslmode=disable",
        )
        .unwrap();
        let hosts: Vec<String> = url.hosts.iter().map(Host::to_string).collect();
        assert_eq!(hosts, ["h1:5433", "h2:5432", "[::1]:5435"]);
        assert_eq!(url.options.get_username(), "u");
        assert_eq!(url.options.get_database(), Some("haggle"));
        assert_eq!(on_host(url.options.clone(), &url.hosts[2]).get_host(), "::1");
    }

    #[test]
    fn one_host_asked_for_writes_is_checked_too() {
        let url = DatabaseUrl::parse("postgres://h1/haggle?target_session_attrs=primary").unwrap();
        assert_eq!(url.hosts, [Host { name: "h1".into(), port: 5432 }]);
        assert!(DatabaseUrl::parse("postgres://h1,h2/haggle?target_session_attrs=any").unwrap().hosts.len() == 2);
    }

    #[test]
    fn what_cannot_be_followed_is_refused_with_a_reason() {
        let standby = DatabaseUrl::parse("postgres://h1,h2/haggle?target_session_attrs=standby").unwrap_err();
        assert!(standby.contains("read-write"), "{standby}");
        assert!(DatabaseUrl::parse("postgres://h1:99999,h2/haggle").unwrap_err().contains("port"));
        assert!(DatabaseUrl::parse("postgres://h1,,h2/haggle").unwrap_err().contains("empty host"));
        assert!(DatabaseUrl::parse("mysql://h1/haggle").unwrap_err().contains("scheme"));
    }
}
