//! Reads made again when their database connection turned out to be lost.
//!
//! The pool keeps connections open between requests; when the server restarts, or ends its
//! connections (an operator, a pooler), the next statement on each of them fails. A read changed
//! nothing, so a `GET` (or `HEAD`) answered because of such a failure ([`LostConnection`]) is made
//! again, once, after every connection that was idle by then has been marked to be pinged before
//! use ([`db::suspect_idle_connections`]). Writes are retried where they know nothing was done:
//! the unit of work's first statement ([`crate::market::Unit::run`], [`crate::market::Market::begin`]).

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;
use futures::future::BoxFuture;
use tower::{Service, ServiceExt};

use super::error::LostConnection;
use crate::db;

/// The layer's service: see the module.
#[derive(Clone)]
pub struct RetryReads<S>(pub S);

impl<S> Service<Request> for RetryReads<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // The service made ready is the one called; its clone serves the next request.
        let clone = self.0.clone();
        let mut inner = std::mem::replace(&mut self.0, clone);
        Box::pin(async move {
            let again = copy_of_read(&request);
            let response = inner.call(request).await?;
            match again {
                Some(request) if response.extensions().get::<LostConnection>().is_some() => {
                    tracing::info!("a read lost its database connection; reading again");
                    db::suspect_idle_connections();
                    inner.ready().await?.call(request).await
                }
                _ => Ok(response),
            }
        })
    }
}

/// A copy of a read, to make it again (it has no body).
fn copy_of_read(request: &Request) -> Option<Request> {
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return None;
    }
    let mut copy = Request::new(Body::empty());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    *copy.extensions_mut() = request.extensions().clone();
    Some(copy)
}
