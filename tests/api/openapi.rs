//! openapi.yaml and the router describe the same API.

use std::collections::BTreeSet;

use haggle_server::http::error::Code;

use crate::spec::{resolve, spec};

#[test]
fn the_router_and_the_document_have_the_same_routes() {
    let mut routed: BTreeSet<(String, String)> = haggle_server::http::endpoints()
        .iter()
        .map(|e| (e.method.as_str().to_lowercase(), e.path.to_owned()))
        .collect();
    // The services mounted beside the routes (the MCP endpoint) are documented too.
    routed.extend(
        haggle_server::http::mounted()
            .into_iter()
            .map(|(method, path)| (method.as_str().to_lowercase(), path.to_owned())),
    );
    let mut documented = BTreeSet::new();
    for (path, item) in spec()["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "patch", "delete", "head", "options"].contains(&method.as_str()) {
                documented.insert((method.clone(), path.clone()));
            }
        }
    }
    let missing: Vec<_> = routed.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&routed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "routed but undocumented: {missing:?}\ndocumented but not routed: {extra:?}"
    );
}

#[test]
fn every_error_code_is_documented() {
    let problem = resolve(&spec()["components"]["schemas"]["Problem"]);
    let documented: BTreeSet<&str> = resolve(&problem["properties"]["code"])["enum"]
        .as_array()
        .expect("Problem.code is an enum")
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    let codes: BTreeSet<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(documented, codes);
}

#[test]
fn every_post_takes_an_idempotency_key_and_documents_its_errors() {
    for (path, item) in spec()["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if !["get", "post", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            let responses =
                operation["responses"].as_object().unwrap_or_else(|| panic!("{method} {path}: no responses"));
            assert!(responses.keys().any(|s| s.starts_with('2')), "{method} {path}: no success response");
            if path.starts_with("/v1/") {
                assert!(responses.keys().any(|s| s.starts_with('4')), "{method} {path}: no error responses");
            }
            // MCP moves take their idempotency key as a tool argument, in the JSON-RPC body.
            if method == "post" && path != haggle_server::http::mcp::PATH {
                let params = operation["parameters"].as_array().cloned().unwrap_or_default();
                let has_key = params.iter().map(resolve).any(|p| p["name"] == "Idempotency-Key" && p["in"] == "header");
                assert!(has_key, "{method} {path}: no Idempotency-Key parameter");
            }
        }
    }
}

#[test]
fn the_document_is_openapi_3_1() {
    assert!(spec()["openapi"].as_str().unwrap().starts_with("3.1"));
}

#[tokio::test]
async fn every_event_type_is_documented_and_storable() {
    use haggle_server::events::EventType;
    let documented: BTreeSet<String> = spec()["components"]["schemas"]["EventType"]["enum"]
        .as_array()
        .expect("EventType is an enum")
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect();
    let known: BTreeSet<String> = EventType::ALL.iter().map(|t| t.as_str().to_owned()).collect();
    assert_eq!(documented, known);
    // The schema's CHECK takes every type and nothing else.
    let db = crate::support::TestDb::create().await;
    let pool = db.pool(1).await;
    let insert = |id: i64, kind: &str| {
        sqlx::query("INSERT INTO events (id, type, audience, data, created_at) VALUES ($1, $2, '{}', '{}', now())")
            .bind(id)
            .bind(kind.to_owned())
    };
    for (id, kind) in known.iter().enumerate() {
        insert(id as i64 + 1, kind).execute(&pool).await.unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
    assert!(insert(1000, "bid.eaten").execute(&pool).await.is_err());
}
