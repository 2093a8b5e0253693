//! The bench's side of the HTTP API: timed calls for the measured work, plain calls for setup,
//! and the checks that fail fast before any of it.

use std::error::Error as _;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use reqwest::{Client, Method, StatusCode};
use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::{Value, json};
use uuid::Uuid;

use super::stats::{Failure, Recorder};
use super::workload::Call;
use crate::domain::Tier;

/// An agent the bench registered: its id and its API key.
#[derive(Debug, Deserialize)]
pub struct Registered {
    pub agent: Created,
    pub api_key: String,
}

/// The id of something the server created.
#[derive(Debug, Deserialize)]
pub struct Created {
    pub id: Uuid,
}

/// A timed call failed; it is already in the recorder.
#[derive(Debug)]
pub struct CallFailed;

/// One connection pool (keep-alive) to one server, shared by every worker.
#[derive(Debug, Clone)]
pub struct Api {
    client: Client,
    base: String,
}

impl Api {
    pub fn new(url: &str, timeout: Duration) -> anyhow::Result<Api> {
        let parsed = url::Url::parse(url)
            .map_err(|error| anyhow!("`{url}` is not a URL ({error}); pass --url http://HOST:PORT"))?;
        if parsed.scheme() != "http" {
            bail!("`{url}`: haggle is built without TLS, so the bench speaks plain http only; pass an http:// URL");
        }
        let client = Client::builder()
            .timeout(timeout)
            .tcp_nodelay(true)
            .user_agent(concat!("haggle-bench/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("building the HTTP client")?;
        Ok(Api { client, base: url.trim_end_matches('/').to_owned() })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A measured POST: the latency of a 2xx answer, from sending to the last byte of the body,
    /// goes to `recorder`; any other outcome is counted there as an error of `call`.
    pub async fn post<T: DeserializeOwned>(
        &self,
        recorder: &mut Recorder,
        call: Call,
        path: &str,
        api_key: &str,
        body: Option<Value>,
    ) -> Result<T, CallFailed> {
        let mut request = self.client.post(self.url(path)).bearer_auth(api_key);
        if let Some(body) = body {
            // Serialized here, before the clock starts.
            request = request.json(&body);
        }
        let started = Instant::now();
        let answer = async {
            let response = request.send().await?;
            let status = response.status();
            Ok::<_, reqwest::Error>((status, response.bytes().await?))
        }
        .await;
        let latency = started.elapsed();
        match answer {
            Ok((status, bytes)) if status.is_success() => match serde_json::from_slice(&bytes) {
                Ok(value) => {
                    recorder.success(call, latency);
                    Ok(value)
                }
                Err(error) => {
                    recorder.failure(
                        call,
                        Failure::Unreadable,
                        &format!("{error}: {}", String::from_utf8_lossy(&bytes)),
                    );
                    Err(CallFailed)
                }
            },
            Ok((status, bytes)) => {
                recorder.failure(call, Failure::Status(status.as_u16()), &String::from_utf8_lossy(&bytes));
                Err(CallFailed)
            }
            Err(error) => {
                recorder.failure(call, Failure::Transport, &error_chain(error));
                Err(CallFailed)
            }
        }
    }

    /// Registers an agent (untimed).
    pub async fn register(&self, name: &str) -> anyhow::Result<Registered> {
        self.setup(Method::POST, "/v1/agents", None, &json!({ "name": name })).await.context(
            "registering a bench agent (the server must allow open registration: HAGGLE_OPEN_REGISTRATION=true)",
        )
    }

    /// Registers an agent and raises it to the AGENCY tier, which listings negotiate with by
    /// default (untimed).
    pub async fn register_buyer(&self, admin_token: &str, name: &str) -> anyhow::Result<Registered> {
        let buyer = self.register(name).await?;
        let _: IgnoredAny = self
            .setup(
                Method::PATCH,
                &format!("/v1/admin/agents/{}", buyer.agent.id),
                Some(admin_token),
                &json!({ "tier": Tier::Agency.as_str() }),
            )
            .await
            .context("raising a bench buyer to the AGENCY tier")?;
        Ok(buyer)
    }

    /// An untimed call for setup; anything but a 2xx is an error naming the call and the answer.
    pub async fn setup<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        body: &Value,
    ) -> anyhow::Result<T> {
        let mut request = self.client.request(method.clone(), self.url(path)).json(body);
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        let response = request.send().await.map_err(|error| anyhow!("{method} {path}: {}", error_chain(error)))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|error| anyhow!("{method} {path}: {}", error_chain(error)))?;
        if !status.is_success() {
            bail!("{method} {path} answered {status}: {}", problem_detail(&bytes));
        }
        serde_json::from_slice(&bytes)
            .with_context(|| format!("{method} {path} answered {status} with an unexpected body"))
    }

    /// Fails unless a Haggle server answers at the URL with its database ready.
    pub async fn check_server(&self) -> anyhow::Result<()> {
        let response = self.client.get(self.url("/readyz")).send().await.map_err(|error| {
            anyhow!(
                "cannot reach a Haggle server at {} ({}). Start one with `haggle serve` (it listens on HAGGLE_BIND), \
                 or point --url / HAGGLE_URL at the one you have",
                self.base,
                error_chain(error)
            )
        })?;
        match response.status() {
            status if status.is_success() => Ok(()),
            StatusCode::SERVICE_UNAVAILABLE => {
                bail!("the server at {} is up but not ready (its database does not answer); fix that first", self.base)
            }
            status => bail!("{}/readyz answered {status}; is --url pointing at a Haggle server?", self.base),
        }
    }

    /// Fails unless the server takes `token` on its operator routes. The probe patches an agent
    /// that cannot exist, so with a good token it is a harmless 404.
    pub async fn check_admin_token(&self, token: &str) -> anyhow::Result<()> {
        let path = format!("/v1/admin/agents/{}", Uuid::nil());
        let response = self
            .client
            .patch(self.url(&path))
            .bearer_auth(token)
            .json(&json!({}))
            .send()
            .await
            .map_err(|error| anyhow!("PATCH {path}: {}", error_chain(error)))?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            let detail = problem_detail(&response.bytes().await.unwrap_or_default());
            bail!(
                "the server refused the admin token ({status}: {detail}). Pass --admin-token or set HAGGLE_ADMIN_TOKEN \
                 to the token the server was started with; the bench needs it to raise its buyers to the AGENCY tier"
            );
        }
        Ok(())
    }
}

/// The `detail` of a problem+json body, or the body itself.
fn problem_detail(bytes: &[u8]) -> String {
    let detail = serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|problem| Some(format!("{} ({})", problem.get("detail")?.as_str()?, problem.get("code")?.as_str()?)));
    detail.unwrap_or_else(|| String::from_utf8_lossy(bytes).chars().take(400).collect())
}

/// reqwest's message with its causes, which say what actually went wrong (refused, reset, timed out).
fn error_chain(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
