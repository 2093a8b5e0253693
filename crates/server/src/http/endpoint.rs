//! One route of the API: its method, path template and handler, as the router mounts it and the
//! OpenAPI document must describe it.

use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{self, MethodRouter};

use super::state::AppState;

/// One route: a method, a path template, and its handler.
pub struct Endpoint {
    pub method: Method,
    pub path: &'static str,
    pub(super) handler: MethodRouter<AppState>,
}

macro_rules! endpoint_constructors {
    ($($name:ident => $method:ident),* $(,)?) => {
        impl Endpoint {
            $(
                pub fn $name<H, T>(path: &'static str, handler: H) -> Endpoint
                where
                    H: Handler<T, AppState>,
                    T: 'static,
                {
                    Endpoint { method: Method::$method, path, handler: routing::$name(handler) }
                }
            )*
        }
    };
}

endpoint_constructors!(get => GET, post => POST, put => PUT, patch => PATCH, delete => DELETE);
