//! The embedded default database: without `DATABASE_URL`, Haggle runs its own PostgreSQL from
//! the locally installed server binaries, keeps its data under the data directory between runs,
//! and listens only on a Unix socket there. As root, PostgreSQL runs as the `postgres` user.

use std::ffi::CString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

/// The database Haggle keeps its tables in.
pub const DATABASE: &str = "haggle";
const SUPERUSER: &str = "postgres";
const PORT: u16 = 5432;
/// Unix socket paths are limited to about 107 bytes.
const MAX_SOCKET_PATH: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "no DATABASE_URL is set, so Haggle tried to run its own PostgreSQL, but found no server binaries \
         (initdb, pg_ctl, postgres){searched}.\n\
         Any one of these gets you going:\n  \
         1. install PostgreSQL (for example `apt install postgresql` or `brew install postgresql`) and run haggle again;\n  \
         2. set DATABASE_URL to a PostgreSQL you run, e.g. DATABASE_URL=postgres://user:pass@localhost:5432/haggle;\n  \
         3. run `docker compose up`, which starts PostgreSQL and Haggle together."
    )]
    NoBinaries { searched: String },
    #[error(
        "running as root, the embedded PostgreSQL must run as the `postgres` user, and no such user exists; \
         create one (`useradd --system postgres`), run haggle as another user, or set DATABASE_URL"
    )]
    NoPostgresUser,
    #[error(
        "the embedded PostgreSQL runs as the `postgres` user, which cannot reach {dir} because {blocker} is not \
         open to other users; choose a HAGGLE_DATA_DIR elsewhere (for example /var/lib/haggle) or set DATABASE_URL"
    )]
    Unreachable { dir: PathBuf, blocker: PathBuf },
    #[error(
        "another haggle server is using the data directory {dir}; stop it first, or give this one another \
         HAGGLE_DATA_DIR"
    )]
    InUse { dir: PathBuf },
    #[error("{action} failed: {detail}")]
    Failed { action: String, detail: String },
    #[error("{action}: {source}")]
    Io {
        action: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the embedded PostgreSQL started but could not be reached: {0}")]
    Connect(#[from] sqlx::Error),
}

fn io(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> EmbeddedError {
    let action = action.into();
    move |source| EmbeddedError::Io { action, source }
}

/// How a process uses the data directory: a server owns it for as long as it runs (one at a
/// time); an operator command shares it, with a running server or with other commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectoryUse {
    Exclusive,
    Shared,
}

/// The system user PostgreSQL runs as, when Haggle runs as root.
#[derive(Debug, Clone, Copy)]
struct RunAs {
    uid: u32,
    gid: u32,
}

/// A PostgreSQL server under a data directory.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    bin_dir: PathBuf,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    log_file: PathBuf,
    run_as: Option<RunAs>,
    /// Whether this process stops the server when it is done: it started it, or it owns the
    /// data directory and found a server left running by a process that died.
    owns: bool,
    /// `<root>/haggle.lock`, locked (flock) for as long as this value lives.
    _lock: Option<std::fs::File>,
}

impl EmbeddedPostgres {
    /// Starts the server under `root` (initialising it on first use), or adopts one already
    /// running there, and makes sure the `haggle` database exists.
    pub async fn start(
        root: &Path,
        bin_dir: Option<&Path>,
        access: DirectoryUse,
    ) -> Result<EmbeddedPostgres, EmbeddedError> {
        let root = root.to_owned();
        let bin_dir = bin_dir.map(Path::to_owned);
        let server = tokio::task::spawn_blocking(move || Self::start_blocking(&root, bin_dir.as_deref(), access))
            .await
            .map_err(|e| EmbeddedError::Failed { action: "starting PostgreSQL".into(), detail: e.to_string() })??;
        if let Err(error) = server.ensure_database().await {
            if server.owns {
                let _ = server.stop().await;
            }
            return Err(error);
        }
        Ok(server)
    }

    fn start_blocking(
        root: &Path,
        bin_dir: Option<&Path>,
        access: DirectoryUse,
    ) -> Result<EmbeddedPostgres, EmbeddedError> {
        let bin_dir = match bin_dir {
            Some(dir) if has_server_binaries(dir) => dir.to_owned(),
            Some(dir) => return Err(EmbeddedError::NoBinaries { searched: format!(" in {}", dir.display()) }),
            None => find_bin_dir().ok_or_else(|| EmbeddedError::NoBinaries {
                searched: " on PATH, through `pg_config --bindir`, or under /usr/lib/postgresql/*/bin".into(),
            })?,
        };
        let run_as = if unsafe { libc::geteuid() } == 0 { Some(postgres_user()?) } else { None };

        let created = !root.exists();
        std::fs::create_dir_all(root).map_err(io(format!("creating {}", root.display())))?;
        let root = std::fs::canonicalize(root).map_err(io(format!("resolving {}", root.display())))?;
        if created && run_as.is_some() {
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755))
                .map_err(io(format!("opening {} to the postgres user", root.display())))?;
        }
        if let Some(user) = run_as {
            check_reachable(&root, user)?;
        }
        let (lock, owns_directory) = lock_directory(&root, access)?;
        let data_dir = root.join("postgres");
        let socket_dir = socket_dir_for(&root);
        for dir in [&data_dir, &socket_dir] {
            if dir.starts_with(&root) {
                std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(io(format!("setting permissions on {}", dir.display())))?;
                if let Some(user) = run_as {
                    std::os::unix::fs::chown(dir, Some(user.uid), Some(user.gid))
                        .map_err(io(format!("giving {} to the postgres user", dir.display())))?;
                }
            } else {
                private_shared_dir(dir, run_as)?;
            }
        }
        let log_file = socket_dir.join("postgres.log");
        // A server owns what it finds running (left by a process that died); a command owns only
        // what it starts.
        let owns = access == DirectoryUse::Exclusive;
        let mut server = EmbeddedPostgres { bin_dir, data_dir, socket_dir, log_file, run_as, owns, _lock: lock };

        if !server.data_dir.join("PG_VERSION").exists() {
            tracing::info!(data_dir = %server.data_dir.display(), "initialising the embedded PostgreSQL");
            server.run_checked(
                "initdb",
                "initialising the embedded PostgreSQL",
                &[
                    "-D".as_ref(),
                    server.data_dir.as_os_str(),
                    "-U".as_ref(),
                    SUPERUSER.as_ref(),
                    "--auth=trust".as_ref(),
                    "--encoding=UTF8".as_ref(),
                    "--locale=C".as_ref(),
                ],
            )?;
        }
        if server.is_running()? {
            tracing::info!(data_dir = %server.data_dir.display(), "using the embedded PostgreSQL already running");
        } else if access == DirectoryUse::Shared && !owns_directory {
            return Err(EmbeddedError::Failed {
                action: "reaching the embedded PostgreSQL".into(),
                detail: format!("a haggle server is starting in {}; try again in a moment", root.display()),
            });
        } else {
            let socket =
                server.socket_dir.to_str().filter(|s| !s.contains('\'')).ok_or_else(|| EmbeddedError::Failed {
                    action: "starting PostgreSQL".into(),
                    detail: format!(
                        "the socket directory {} must be valid UTF-8 without quotes",
                        server.socket_dir.display()
                    ),
                })?;
            let options = format!("-c listen_addresses='' -k '{socket}' -p {PORT}");
            tracing::info!(data_dir = %server.data_dir.display(), "starting the embedded PostgreSQL");
            let started = server.run_checked(
                "pg_ctl",
                "starting the embedded PostgreSQL",
                &[
                    "start".as_ref(),
                    "-w".as_ref(),
                    "-t".as_ref(),
                    "60".as_ref(),
                    "-D".as_ref(),
                    server.data_dir.as_os_str(),
                    "-l".as_ref(),
                    server.log_file.as_os_str(),
                    "-o".as_ref(),
                    options.as_ref(),
                ],
            );
            if let Err(error) = started {
                // A server that did not come up in time may still be starting: stop it.
                let stop =
                    ["stop".as_ref(), "-m".as_ref(), "immediate".as_ref(), "-D".as_ref(), server.data_dir.as_os_str()];
                let _ = server.run("pg_ctl", &stop);
                return Err(error);
            }
            server.owns = true;
        }
        Ok(server)
    }

    /// Options to connect to a database of this server over its socket.
    pub fn connect_options(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new().socket(&self.socket_dir).port(PORT).username(SUPERUSER).database(database)
    }

    /// Whether this process stops the server when it is done with it.
    pub fn owns(&self) -> bool {
        self.owns
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    async fn ensure_database(&self) -> Result<(), EmbeddedError> {
        let mut conn = self.connect_options("postgres").disable_statement_logging().connect().await?;
        let exists = sqlx::query_scalar!(
            r#"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS "exists!""#,
            DATABASE
        )
        .fetch_one(&mut conn)
        .await?;
        if !exists {
            // Built at run time: a name in a statement is no parameter.
            sqlx::query(&format!("CREATE DATABASE {DATABASE}")).execute(&mut conn).await?;
        }
        conn.close().await?;
        Ok(())
    }

    /// Stops the server with a fast shutdown: connections are closed, data is safe on disk.
    pub async fn stop(self) -> Result<(), EmbeddedError> {
        tokio::task::spawn_blocking(move || {
            tracing::info!(data_dir = %self.data_dir.display(), "stopping the embedded PostgreSQL");
            if !self.is_running()? {
                return Ok(());
            }
            self.run_checked(
                "pg_ctl",
                "stopping the embedded PostgreSQL",
                &[
                    "stop".as_ref(),
                    "-w".as_ref(),
                    "-m".as_ref(),
                    "fast".as_ref(),
                    "-D".as_ref(),
                    self.data_dir.as_os_str(),
                ],
            )
            .map(drop)
        })
        .await
        .map_err(|e| EmbeddedError::Failed { action: "stopping PostgreSQL".into(), detail: e.to_string() })?
    }

    fn is_running(&self) -> Result<bool, EmbeddedError> {
        let output = self.run("pg_ctl", &["status".as_ref(), "-D".as_ref(), self.data_dir.as_os_str()])?;
        Ok(output.status.success())
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<Output, EmbeddedError> {
        let mut command = Command::new(self.bin_dir.join(program));
        command.args(args).stdin(Stdio::null()).env("LC_ALL", "C");
        // Its own process group: a Ctrl-C in the terminal reaches Haggle, which then stops
        // PostgreSQL in order, rather than both at once.
        command.process_group(0);
        if let Some(user) = self.run_as {
            command.uid(user.uid).gid(user.gid).current_dir(&self.data_dir);
        }
        command.output().map_err(io(format!("running {}", self.bin_dir.join(program).display())))
    }

    fn run_checked(&self, program: &str, action: &str, args: &[&std::ffi::OsStr]) -> Result<Output, EmbeddedError> {
        let output = self.run(program, args)?;
        if output.status.success() {
            return Ok(output);
        }
        let mut detail = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        if let Ok(log) = std::fs::read_to_string(&self.log_file) {
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            detail.push_str("\nserver log (last lines):\n");
            detail.push_str(&tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        Err(EmbeddedError::Failed { action: action.to_owned(), detail })
    }
}

/// Locks `<root>/haggle.lock`: exclusively for a server, shared for an operator command. The
/// lock goes with the process, however it ends. Returns the lock, if taken, and whether this
/// process owns the directory (no server holds it).
fn lock_directory(root: &Path, access: DirectoryUse) -> Result<(Option<std::fs::File>, bool), EmbeddedError> {
    use std::os::fd::AsRawFd;
    let path = root.join("haggle.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(format!("opening {}", path.display())))?;
    let operation = match access {
        DirectoryUse::Exclusive => libc::LOCK_EX,
        DirectoryUse::Shared => libc::LOCK_SH,
    };
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), operation | libc::LOCK_NB) } == 0 {
        return Ok((Some(file), true));
    }
    match access {
        DirectoryUse::Exclusive => Err(EmbeddedError::InUse { dir: root.to_owned() }),
        // A server holds the directory: use its PostgreSQL, and leave it running.
        DirectoryUse::Shared => Ok((None, false)),
    }
}

/// Creates (or accepts) a directory outside the data directory for the socket: it must be a
/// real directory, not a link, owned by the user PostgreSQL runs as and closed to others.
fn private_shared_dir(dir: &Path, run_as: Option<RunAs>) -> Result<(), EmbeddedError> {
    use std::os::unix::fs::DirBuilderExt;
    let owner = run_as.map_or_else(|| unsafe { libc::geteuid() }, |user| user.uid);
    match std::fs::symlink_metadata(dir) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().mode(0o700).create(dir).map_err(io(format!("creating {}", dir.display())))?;
            if let Some(user) = run_as {
                std::os::unix::fs::chown(dir, Some(user.uid), Some(user.gid))
                    .map_err(io(format!("giving {} to the postgres user", dir.display())))?;
            }
            Ok(())
        }
        Err(error) => Err(io(format!("inspecting {}", dir.display()))(error)),
        Ok(meta) if meta.file_type().is_dir() && meta.uid() == owner && meta.mode() & 0o077 == 0 => Ok(()),
        Ok(_) => Err(EmbeddedError::Failed {
            action: "preparing the socket directory".into(),
            detail: format!(
                "{} exists but is not a private directory of the user PostgreSQL runs as; remove it, or use a shorter HAGGLE_DATA_DIR",
                dir.display()
            ),
        }),
    }
}

/// The programs the embedded server runs.
const SERVER_PROGRAMS: [&str; 3] = ["initdb", "pg_ctl", "postgres"];

fn has_server_binaries(dir: &Path) -> bool {
    has_programs(dir, &SERVER_PROGRAMS)
}

fn has_programs(dir: &Path, programs: &[&str]) -> bool {
    programs.iter().all(|name| dir.join(name).is_file())
}

fn find_bin_dir() -> Option<PathBuf> {
    find_postgres_programs(&SERVER_PROGRAMS)
}

/// The directory of PostgreSQL's `programs`: on PATH, then through `pg_config --bindir`, then
/// under `/usr/lib/postgresql/*/bin`, newest version first.
pub fn find_postgres_programs(programs: &[&str]) -> Option<PathBuf> {
    let has_them = |dir: &Path| has_programs(dir, programs);
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .find(|dir| has_them(dir));
    if on_path.is_some() {
        return on_path;
    }
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()))
        .filter(|dir| has_them(dir));
    if from_pg_config.is_some() {
        return from_pg_config;
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.split('.').next()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_them(dir))
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir)
}

fn postgres_user() -> Result<RunAs, EmbeddedError> {
    let name = CString::new(SUPERUSER).expect("no NUL in a constant");
    // SAFETY: getpwnam returns a pointer into static storage or null; it is read at once.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        return Err(EmbeddedError::NoPostgresUser);
    }
    let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
    Ok(RunAs { uid, gid })
}

/// The postgres user must be able to walk from `/` to the data directory.
fn check_reachable(root: &Path, user: RunAs) -> Result<(), EmbeddedError> {
    for dir in root.ancestors() {
        let Ok(meta) = std::fs::metadata(dir) else { continue };
        let mode = meta.mode();
        let open = if meta.uid() == user.uid {
            mode & 0o100 != 0
        } else if meta.gid() == user.gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !open {
            return Err(EmbeddedError::Unreachable { dir: root.to_owned(), blocker: dir.to_owned() });
        }
    }
    Ok(())
}

/// The socket directory: `<root>/run`, or a short path under the temporary directory where that
/// would make the socket's path too long.
fn socket_dir_for(root: &Path) -> PathBuf {
    let preferred = root.join("run");
    let socket_path_len = preferred.join(format!(".s.PGSQL.{PORT}")).as_os_str().len();
    if socket_path_len <= MAX_SOCKET_PATH {
        return preferred;
    }
    let digest = crate::secrets::sha256(root.as_os_str().as_encoded_bytes());
    std::env::temp_dir().join(format!("haggle-{}", hex::encode(&digest[..8])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_data_directories_get_a_short_socket_directory() {
        assert_eq!(socket_dir_for(Path::new("/srv/haggle")), Path::new("/srv/haggle/run"));
        let deep = PathBuf::from(format!("/srv/{}", "d".repeat(120)));
        let socket = socket_dir_for(&deep);
        assert!(socket.join(".s.PGSQL.5432").as_os_str().len() <= MAX_SOCKET_PATH);
        assert_eq!(socket, socket_dir_for(&deep), "the same directory gets the same socket");
    }

    #[test]
    fn the_shared_socket_directory_must_be_private_and_real() {
        let base = std::env::temp_dir().join(format!("haggle-unit-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&base).unwrap();
        let fresh = base.join("fresh");
        private_shared_dir(&fresh, None).unwrap();
        assert_eq!(std::fs::metadata(&fresh).unwrap().mode() & 0o777, 0o700);
        private_shared_dir(&fresh, None).expect("an existing private directory is accepted");

        let target = base.join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(private_shared_dir(&link, None).is_err(), "a symlink is refused");
        let open = base.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(private_shared_dir(&open, None).is_err(), "a directory others can enter is refused");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_missing_binaries_message_names_the_three_ways_out() {
        let message = EmbeddedError::NoBinaries { searched: " in /nowhere".into() }.to_string();
        assert!(message.contains("install PostgreSQL"));
        assert!(message.contains("DATABASE_URL"));
        assert!(message.contains("docker compose up"));
    }
}
