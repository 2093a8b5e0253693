//! The test harness: a fresh database per test, the app on a free port, a real HTTP client, and
//! every response checked against openapi.yaml.

use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use haggle_server::app::{App, AppConfig};
use haggle_server::http::Settings;
use haggle_server::market::Rules;
use haggle_server::webhooks::WebhookSettings;
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};
use tokio_util::sync::CancellationToken;

pub const ADMIN_TOKEN: &str = "test-operator-token-0123456789";

/// The server that test databases are created on.
pub fn admin_url() -> String {
    std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A database of its own for one test, dropped when the test ends, pass or fail.
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub async fn create() -> TestDb {
        let name = format!("haggle_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&admin_url())
            .await
            .expect("tests need PostgreSQL at TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres)");
        sqlx::query(&format!("CREATE DATABASE \"{name}\"")).execute(&mut admin).await.expect("create test database");
        admin.close().await.ok();
        let mut url = url::Url::parse(&admin_url()).expect("TEST_DATABASE_URL is a URL");
        url.set_path(&name);
        TestDb { name, url: url.to_string() }
    }

    pub fn options(&self) -> PgConnectOptions {
        PgConnectOptions::from_str(&self.url).expect("valid url").disable_statement_logging()
    }

    /// A migrated pool on this database.
    pub async fn pool(&self, size: u32) -> PgPool {
        let pool = haggle_server::db::connect(self.options(), size).await.expect("connect to test database");
        haggle_server::db::migrate(&pool).await.expect("migrate test database");
        pool
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                if let Ok(mut admin) = PgConnection::connect(&admin_url()).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                        .execute(&mut admin)
                        .await;
                }
            });
        })
        .join();
    }
}

/// The app, serving on 127.0.0.1 with its own database. The sweeper is off: tests call
/// `run_once`.
pub struct TestApp {
    pub base: String,
    pub pool: PgPool,
    pub client: reqwest::Client,
    shutdown: CancellationToken,
    db: std::sync::Arc<TestDb>,
    hub: std::sync::Arc<OnceLock<haggle_server::events::Hub>>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if !std::thread::panicking() {
            let panics = std::mem::take(&mut *TASK_PANICS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
            assert!(panics.is_empty(), "a background task panicked during the test:\n{}", panics.join("\n"));
        }
    }
}

/// Panics inside tasks the runtime spawned: the server's workers and connections, and a test's
/// own background tasks. The runtime catches them, so a dead worker would otherwise only leave a
/// line in the log while the test passed; every `TestApp` fails its test when it is dropped if
/// one was recorded. (A process that runs several tests at once may blame another test's.)
static TASK_PANICS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Installs, once, the panic hook that records panics inside spawned tasks, before the usual
/// report on standard error.
fn record_task_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some(task) = tokio::task::try_id() {
                let thread = std::thread::current();
                let panic = format!("task {task} on thread {}: {info}", thread.name().unwrap_or("unnamed"));
                TASK_PANICS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(panic);
            }
            report(info);
        }));
    });
}

pub fn test_config() -> AppConfig {
    AppConfig {
        settings: Settings {
            admin_token: Some(ADMIN_TOKEN.to_owned()),
            open_registration: true,
            rules: Rules::default(),
            body_limit: 64 * 1024,
            request_timeout: Duration::from_secs(30),
            rate_limit: 0,
            heartbeat: Duration::from_secs(1),
            stream_recheck: Duration::from_secs(10),
            trusted_proxies: Default::default(),
            key_cache_ttl: Duration::from_secs(5),
            move_workers: 1,
            live_cache: 20_000,
            max_waiters: haggle_server::events::DEFAULT_MAX_WAITERS,
            max_waiters_per_agent: haggle_server::events::MAX_WAITERS_PER_AGENT,
            webhooks: WebhookSettings {
                allow_private: true,
                retry_schedule: vec![Duration::from_millis(100); 5],
                timeout: Duration::from_secs(5),
                concurrency: 8,
            },
            mcp: Default::default(),
        },
        sweep_interval: Duration::ZERO,
        secret_key: None,
        event_retention: Duration::ZERO,
        order_complete_after: Duration::from_secs(14 * 24 * 3600),
        auto_workers: 2,
        auto_chain: haggle_server::executor::DEFAULT_CHAIN,
        connections: Default::default(),
        metrics: Default::default(),
        primary: None,
    }
}

/// An instance that remembers API keys for an hour, longer than any test: a change to a key or
/// an agent that another such instance sees within a test reached it by its notification.
pub fn remember_keys_for_an_hour(config: &mut AppConfig) {
    config.settings.key_cache_ttl = Duration::from_secs(3600);
}

/// How long a notification may take to reach another instance before a test gives up; far
/// below the hour `remember_keys_for_an_hour` keeps keys.
pub const NOTIFIED_WITHIN: Duration = Duration::from_secs(30);

/// A registered agent and its API key.
#[derive(Debug, Clone)]
pub struct Agent {
    pub id: String,
    pub key: String,
}

/// A response, with its body parsed as JSON when it is JSON.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Resp {
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }

    pub fn id(&self) -> String {
        self.body["id"].as_str().expect("response has an id").to_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    #[track_caller]
    pub fn expect(self, status: u16) -> Resp {
        assert_eq!(self.status, status, "unexpected status; body: {}", self.body);
        self
    }

    #[track_caller]
    pub fn expect_problem(self, status: u16, code: &str) -> Resp {
        assert_eq!((self.status, self.code()), (status, code), "unexpected answer; body: {}", self.body);
        self
    }
}

/// A request body: JSON, raw bytes, or nothing.
pub enum Body {
    None,
    Json(Value),
    Raw(Vec<u8>),
}

impl TestApp {
    pub async fn spawn() -> TestApp {
        TestApp::spawn_with(|_| {}).await
    }

    pub async fn spawn_with(configure: impl FnOnce(&mut AppConfig)) -> TestApp {
        let db = std::sync::Arc::new(TestDb::create().await);
        TestApp::start(db, configure).await
    }

    async fn start(db: std::sync::Arc<TestDb>, configure: impl FnOnce(&mut AppConfig)) -> TestApp {
        let pool = db.pool(10).await;
        TestApp::spawn_on(db, pool, configure).await
    }

    /// The app on a database of the caller's, over a pool of the caller's (one that reaches the
    /// database some other way than directly, say); the database must be migrated.
    pub async fn spawn_on(db: std::sync::Arc<TestDb>, pool: PgPool, configure: impl FnOnce(&mut AppConfig)) -> TestApp {
        record_task_panics();
        let mut config = test_config();
        configure(&mut config);
        let app = App::build(pool.clone(), "127.0.0.1:0", config).await.expect("bind");
        let base = format!("http://{}", app.local_addr());
        let hub = app.hub();
        let shutdown = CancellationToken::new();
        tokio::spawn(app.run_until_stopped(shutdown.clone()));
        let client = reqwest::Client::builder().pool_max_idle_per_host(64).build().expect("client");
        TestApp { base, pool, client, shutdown, db, hub }
    }

    /// A second server instance on the same database, with its own pool, listener and workers.
    pub async fn another_instance(&self) -> TestApp {
        self.another_instance_with(|_| {}).await
    }

    /// Another instance on the same database, configured differently.
    pub async fn another_instance_with(&self, configure: impl FnOnce(&mut AppConfig)) -> TestApp {
        TestApp::start(self.db.clone(), configure).await
    }

    /// The URL of this instance's database.
    /// The market over this app's database, for calling a worker's `run_once` (it wakes
    /// nobody: the tests drive the workers themselves).
    pub fn market(&self) -> haggle_server::market::Market {
        haggle_server::market::Market::new(self.pool.clone(), None, Default::default())
    }

    pub fn database_url(&self) -> &str {
        &self.db.url
    }

    /// The waiters this instance holds now.
    pub fn waiters(&self) -> usize {
        self.hub.get().map_or(0, |hub| hub.waiters())
    }

    /// Waits until this instance holds `count` waiters (long polls, bid waits, streams, the
    /// operator's market stream): each has subscribed, so it will hear of any event from now on.
    pub async fn until_waiting(&self, count: usize) {
        eventually(&format!("{count} waiters on the instance"), || async {
            (self.hub.get().is_some() && self.waiters() == count).then_some(())
        })
        .await;
    }

    /// Stops this instance's server and workers.
    pub fn stop(&self) {
        self.shutdown.cancel();
    }

    /// Sends a request and checks the answer against the OpenAPI document.
    pub async fn send(
        &self,
        method: Method,
        path: impl AsRef<str>,
        key: Option<&str>,
        body: Body,
        headers: &[(&str, &str)],
    ) -> Resp {
        let path = path.as_ref();
        let mut request = self.client.request(method.clone(), format!("{}{}", self.base, path));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request = match body {
            Body::None => request,
            Body::Json(value) => request.json(&value),
            Body::Raw(bytes) => request.header("content-type", "application/json").body(bytes),
        };
        let response = request.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let text = response.text().await.expect("read body");
        let body = if content_type.contains("json") {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: invalid JSON {e}: {text}"))
        } else {
            Value::String(text)
        };
        let resp = Resp { status, headers, body };
        crate::spec::check_response(&method, path, &content_type, &resp);
        if content_type.starts_with(haggle_server::http::error::PROBLEM_JSON) {
            // Every problem document names the request it answers, as the answer's header does.
            assert_eq!(
                resp.body["request_id"].as_str(),
                resp.header("x-request-id"),
                "{method} {path}: the problem's request_id is not the header's; body: {}",
                resp.body
            );
        }
        resp
    }

    pub async fn get(&self, path: impl AsRef<str>, key: &str) -> Resp {
        self.send(Method::GET, path, Some(key), Body::None, &[]).await
    }

    pub async fn post(&self, path: impl AsRef<str>, key: &str, body: Value) -> Resp {
        self.send(Method::POST, path, Some(key), Body::Json(body), &[]).await
    }

    pub async fn post_empty(&self, path: impl AsRef<str>, key: &str) -> Resp {
        self.send(Method::POST, path, Some(key), Body::None, &[]).await
    }

    pub async fn patch(&self, path: impl AsRef<str>, key: &str, body: Value) -> Resp {
        self.send(Method::PATCH, path, Some(key), Body::Json(body), &[]).await
    }

    pub async fn put(&self, path: impl AsRef<str>, key: &str, body: Value) -> Resp {
        self.send(Method::PUT, path, Some(key), Body::Json(body), &[]).await
    }

    pub async fn delete(&self, path: impl AsRef<str>, key: &str) -> Resp {
        self.send(Method::DELETE, path, Some(key), Body::None, &[]).await
    }

    /// A POST with an `Idempotency-Key`; `agent_key` is `None` for unauthenticated routes.
    pub async fn post_keyed(&self, path: impl AsRef<str>, agent_key: Option<&str>, body: Value, key: &str) -> Resp {
        self.send(Method::POST, path, agent_key, Body::Json(body), &[("idempotency-key", key)]).await
    }

    pub async fn register(&self, name: &str) -> Agent {
        let resp =
            self.send(Method::POST, "/v1/agents", None, Body::Json(json!({ "name": name })), &[]).await.expect(201);
        Agent {
            id: resp.body["agent"]["id"].as_str().unwrap().to_owned(),
            key: resp.body["api_key"].as_str().unwrap().to_owned(),
        }
    }

    pub async fn set_tier(&self, agent: &Agent, tier: &str) {
        self.patch(&format!("/v1/admin/agents/{}", agent.id), ADMIN_TOKEN, json!({ "tier": tier })).await.expect(200);
    }

    /// A buyer allowed to negotiate on default listings.
    pub async fn buyer(&self, name: &str) -> Agent {
        let agent = self.register(name).await;
        self.set_tier(&agent, "AGENCY").await;
        agent
    }

    /// A listing with the given fields over defaults (ask 100000).
    pub async fn listing(&self, seller: &Agent, fields: Value) -> String {
        let mut body = json!({ "title": "Standing desk", "ask_amount": 100000 });
        for (name, value) in fields.as_object().expect("fields object") {
            body[name] = value.clone();
        }
        self.post("/v1/listings", &seller.key, body).await.expect(201).id()
    }

    /// Places a bid and returns its id.
    pub async fn place(&self, buyer: &Agent, listing: &str, amount: i64) -> String {
        let resp = self.post(&format!("/v1/listings/{listing}/bids"), &buyer.key, json!({ "amount": amount })).await;
        resp.expect(201).body["bid"]["id"].as_str().unwrap().to_owned()
    }

    /// Counters a bid and returns the new bid's id.
    pub async fn counter(&self, agent: &Agent, bid: &str, amount: i64) -> String {
        let resp = self.post(&format!("/v1/bids/{bid}/counter"), &agent.key, json!({ "amount": amount })).await;
        resp.expect(201).body["bid"]["id"].as_str().unwrap().to_owned()
    }

    /// Every row of every table the catalogue lists, to show that a refused request changed
    /// nothing. A table added by a migration is in it without anyone remembering to add it.
    pub async fn snapshot(&self) -> String {
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name",
        )
        .fetch_all(&self.pool)
        .await
        .expect("list the tables");
        assert!(tables.iter().any(|table| table == "bids"), "the catalogue lists no market table: {tables:?}");
        let mut all = String::new();
        for table in tables.iter().filter(|table| !SNAPSHOT_MOVES_BY_ITSELF.contains(&table.as_str())) {
            let rows: Vec<Value> =
                sqlx::query_scalar(&format!("SELECT to_jsonb(t) FROM \"{table}\" t ORDER BY to_jsonb(t)::text"))
                    .fetch_all(&self.pool)
                    .await
                    .expect("snapshot");
            all.push_str(&format!("{table}: {}\n", Value::Array(rows)));
        }
        all
    }

    /// Locks a listing row in a transaction of the test's own, so that requests needing it wait
    /// inside their transactions until the returned transaction ends.
    pub async fn hold_listing(&self, listing: &str) -> sqlx::Transaction<'static, sqlx::Postgres> {
        let mut blocker = self.pool.begin().await.expect("begin");
        sqlx::query("SELECT 1 FROM listings WHERE id = $1::uuid FOR UPDATE")
            .bind(listing)
            .execute(&mut *blocker)
            .await
            .expect("lock the listing");
        blocker
    }

    pub async fn count(&self, sql: impl AsRef<str>) -> i64 {
        sqlx::query_scalar(sql.as_ref()).fetch_one(&self.pool).await.expect("count query")
    }
}

/// The only tables a snapshot leaves out: those that change with no request at all.
/// `instances` is rewritten by every instance's heartbeat (`seen_at`), every two seconds.
const SNAPSHOT_MOVES_BY_ITSELF: &[&str] = &["instances"];

/// A seller, an AGENCY buyer, and a listing of the seller's asking 100000.
pub struct Deal {
    pub seller: Agent,
    pub buyer: Agent,
    pub listing: String,
}

impl Deal {
    pub async fn new(app: &TestApp, fields: Value) -> Deal {
        let seller = app.register("seller").await;
        let buyer = app.buyer("buyer").await;
        let listing = app.listing(&seller, fields).await;
        Deal { seller, buyer, listing }
    }
}

/// An event to write straight into the log (`db::events::write`), as another instance or a
/// transaction the test holds would: a `bid.rejected` concerning `audience`, naming nothing.
pub fn bare_event(audience: Vec<uuid::Uuid>) -> haggle_server::events::NewEvent {
    haggle_server::events::NewEvent {
        kind: haggle_server::events::EventType::BidRejected,
        audience,
        listing_id: None,
        thread_id: None,
        bid_id: None,
        order_id: None,
        data: serde_json::json!({}),
    }
}

/// Polls `check` until it gives a value, failing the test after 30 s.
pub async fn eventually<T, F: std::future::Future<Output = Option<T>>>(what: &str, mut check: impl FnMut() -> F) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The path of the built `haggle` binary.
pub fn haggle_bin() -> &'static str {
    env!("CARGO_BIN_EXE_haggle")
}

/// A scratch directory under the target directory, reachable by the `postgres` user.
pub fn scratch_dir() -> tempfile::TempDir {
    static BASE: OnceLock<std::path::PathBuf> = OnceLock::new();
    let base = BASE.get_or_init(|| {
        let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(&dir).expect("target tmp dir");
        dir
    });
    let dir = tempfile::Builder::new().prefix("t").tempdir_in(base).expect("scratch dir");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod scratch dir");
    dir
}

/// A `haggle serve` process, started with the given environment on a free port.
pub struct ServerProcess {
    child: std::process::Child,
    pub base: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl ServerProcess {
    pub fn spawn(env: &[(&str, &str)]) -> ServerProcess {
        use std::io::BufRead;
        let mut command = std::process::Command::new(haggle_bin());
        command
            .arg("serve")
            .env_remove("DATABASE_URL")
            .env("HAGGLE_BIND", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .env("HAGGLE_LOG_FORMAT", "text")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("start haggle serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (found, address) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                // Logged before the address is handed over: once `spawn` returns, the log holds
                // every line up to the listener's.
                {
                    let mut log = sink.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
                if let Some(rest) = line.split("listening on ").nth(1) {
                    // The address ends the text line, or the JSON line's message.
                    let address = rest.split(|c: char| c == '"' || c.is_whitespace()).next().unwrap_or("");
                    let _ = found.send(address.to_owned());
                }
            }
        });
        let base = match address.recv_timeout(Duration::from_secs(120)) {
            Ok(base) => base,
            Err(_) => {
                let _ = child.kill();
                panic!("haggle serve did not start:\n{}", log.lock().unwrap());
            }
        };
        ServerProcess { child, base, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Kills the process outright (SIGKILL), as a crash would, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.send_sigterm();
        match self.wait_for_exit(Duration::from_secs(60)) {
            Some(status) => status,
            None => panic!("haggle did not stop after SIGTERM:\n{}", self.log()),
        }
    }

    /// Asks the process to stop, as an orchestrator does.
    pub fn send_sigterm(&self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }

    /// Waits up to `limit` for the process to exit; `None` if it is still running.
    pub fn wait_for_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}
