//! The approval page's static files, built into the binary: its script and its style sheet,
//! each served at a URL naming the version of the set, so browsers keep it until a new build.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const ASSETS: [Asset; 2] = [
    Asset {
        name: "approve.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("assets/approve.js"),
    },
    Asset { name: "approve.css", content_type: "text/css; charset=utf-8", bytes: include_bytes!("assets/approve.css") },
];

/// The version of the set: the start of the SHA-256 of every file in it.
static VERSION: LazyLock<String> = LazyLock::new(|| {
    let parts: Vec<&[u8]> = ASSETS.iter().flat_map(|asset| [asset.name.as_bytes(), asset.bytes]).collect();
    hex::encode(&crate::secrets::sha256_parts(&parts)[..6])
});

/// The URL a page links a file by.
pub fn url(name: &str) -> String {
    debug_assert!(ASSETS.iter().any(|asset| asset.name == name), "no approval page asset {name}");
    format!("{}/assets/{}/{name}", super::PATH, *VERSION)
}

/// `GET /approve/assets/{version}/{name}`. A file asked for under another version is served
/// too, but not kept.
pub async fn serve(Path((version, name)): Path<(String, String)>) -> Response {
    let Some(asset) = ASSETS.iter().find(|asset| asset.name == name) else {
        return (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "no such file\n")
            .into_response();
    };
    let cache = if version == *VERSION { "public, max-age=31536000, immutable" } else { "no-cache" };
    ([(header::CONTENT_TYPE, asset.content_type), (header::CACHE_CONTROL, cache)], asset.bytes).into_response()
}
