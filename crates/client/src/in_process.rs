//! The API in the client's own process: each request is handed to the server's router as a
//! [`tower::Service`], with no socket and no HTTP on the wire, and its answer read as it would
//! be from the network.
//!
//! A request is the one the HTTP transport would send (built by the same code: its query, its
//! key, its `Idempotency-Key`, its JSON body), in origin form (`/v1/...`) with the `Host` of the
//! base URL and its `Content-Length`, as a server reads it off the wire; it also carries what
//! the client was told to carry ([`Carried`]): the extensions and headers of the request it is
//! made for, say the address of the client behind it.

use std::convert::Infallible;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

use crate::ClientError;

/// The `User-Agent` of every request, over HTTP or in process.
pub(crate) const USER_AGENT: &str = concat!("haggle-client/", env!("CARGO_PKG_VERSION"));

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Whatever went wrong inside a body.
#[derive(Debug)]
pub struct BodyError(Box<dyn std::error::Error + Send + Sync>);

impl BodyError {
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> BodyError {
        BodyError(error.into())
    }
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// A request's or an answer's body in process.
pub type ApiBody = UnsyncBoxBody<Bytes, BodyError>;

/// The API as a service in this process: the server's router, with every layer a request
/// over the network passes.
pub type ApiService = BoxCloneSyncService<http::Request<ApiBody>, http::Response<ApiBody>, Infallible>;

/// What every request of an in-process client carries besides its own: the extensions (which
/// only a request in process can carry) and headers of the request it is made for.
#[derive(Debug, Clone, Default)]
pub struct Carried {
    pub extensions: http::Extensions,
    pub headers: http::HeaderMap,
}

/// The API in process, and what its requests carry.
#[derive(Clone)]
pub(crate) struct InProcess {
    pub service: ApiService,
    pub carried: Carried,
}

/// Why a request in process got no answer.
pub(crate) enum Failure {
    /// Nothing within the time given.
    TimedOut(Duration),
    /// The answer's body broke off.
    Body(BodyError),
}

impl Failure {
    pub fn into_error(self, method: &reqwest::Method, url: &str) -> ClientError {
        let detail = match self {
            Failure::TimedOut(after) => format!("no answer within {after:?}"),
            Failure::Body(error) => format!("the answer broke off: {error}"),
        };
        ClientError::InProcess { method: method.to_string(), url: url.to_owned(), detail }
    }
}

impl InProcess {
    /// The answer to `request` as it arrives (its head; the body follows), within its timeout
    /// when it has one.
    pub async fn send(&self, request: reqwest::Request) -> Result<http::Response<ApiBody>, Failure> {
        within(request.timeout().copied(), async { Ok(self.call(request).await) }).await
    }

    /// The whole answer to `request`: its status and body, all of it within the request's
    /// timeout, as the HTTP transport's timeout covers the body too.
    pub async fn exchange(&self, request: reqwest::Request) -> Result<(http::StatusCode, Bytes), Failure> {
        within(request.timeout().copied(), async {
            let response = self.call(request).await;
            let status = response.status();
            let body = response.into_body().collect().await.map_err(Failure::Body)?.to_bytes();
            Ok((status, body))
        })
        .await
    }

    fn call(&self, request: reqwest::Request) -> BoxFuture<'static, http::Response<ApiBody>> {
        let request = self.to_http(request);
        let service = self.service.clone();
        Box::pin(async move { service.oneshot(request).await.unwrap_or_else(|never| match never {}) })
    }

    /// The request as a server reads it off the wire, with what the client carries.
    fn to_http(&self, request: reqwest::Request) -> http::Request<ApiBody> {
        let url = request.url();
        let target = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let host = match url.port() {
            Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_owned(),
        };
        let body = request.body().and_then(reqwest::Body::as_bytes).map(Bytes::copy_from_slice).unwrap_or_default();
        let mut http = http::Request::new(Full::new(body.clone()).map_err(|never| match never {}).boxed_unsync());
        *http.method_mut() = request.method().clone();
        *http.uri_mut() = target.parse().unwrap_or_else(|_| http::Uri::from_static("/"));
        let headers = http.headers_mut();
        for (name, value) in &self.carried.headers {
            headers.append(name, value.clone());
        }
        for (name, value) in request.headers() {
            headers.insert(name, value.clone());
        }
        if let Ok(host) = http::HeaderValue::from_str(&host) {
            headers.insert(http::header::HOST, host);
        }
        headers.insert(http::header::USER_AGENT, http::HeaderValue::from_static(USER_AGENT));
        if request.body().is_some() {
            headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(body.len()));
        }
        http.extensions_mut().extend(self.carried.extensions.clone());
        http
    }
}

/// `work`, given up after `timeout` when there is one.
async fn within<T>(timeout: Option<Duration>, work: impl Future<Output = Result<T, Failure>>) -> Result<T, Failure> {
    match timeout {
        Some(timeout) => tokio::time::timeout(timeout, work).await.map_err(|_| Failure::TimedOut(timeout))?,
        None => work.await,
    }
}
