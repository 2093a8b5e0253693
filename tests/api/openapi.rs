//! openapi.yaml and the router describe the same API.

use std::collections::BTreeSet;

use haggle_server::http::error::Code;

use haggle_domain::money::{self, AmountLimits, RawAmount};
use haggle_domain::strategy::Policy;
use haggle_domain::{Party, rejection};
use serde_json::{Value, json};

use crate::spec::{is_valid, resolve, spec};

fn schema(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

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
            // MCP moves take their idempotency key as a tool argument, in the JSON-RPC body; A2A
            // moves are keyed by their message's id.
            if method == "post"
                && path != haggle_server::http::mcp::PATH
                && !path.starts_with(haggle_server::http::a2a::PATH)
            {
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

#[test]
fn the_text_patterns_are_the_servers_text_rule() {
    let (plain, non_blank) = (schema("PlainText"), schema("NonBlankText"));
    let samples = (0..=0x3100u32).chain([0xfeff, 0x1_0000]).filter_map(char::from_u32);
    for c in samples {
        for text in [c.to_string(), format!("a{c}"), format!("{c}{c} ")] {
            let value = json!(text);
            assert_eq!(is_valid(&plain, &value), rejection::text(&text, false, 10).is_ok(), "PlainText {text:?}");
            assert_eq!(is_valid(&non_blank, &value), rejection::text(&text, true, 10).is_ok(), "NonBlankText {text:?}");
        }
    }
}

#[test]
fn the_policies_the_document_takes_are_the_ones_the_server_takes() {
    let accepted = |body: &Value| {
        serde_json::from_value::<Policy>(body.clone())
            .is_ok_and(|policy| policy.validate(Party::Seller, None, AmountLimits::default()).is_ok())
    };
    let counter = |counter: Value| json!({ "limit": 5000, "counter": counter });
    let bodies = [
        json!({ "limit": 5000, "counter": { "strategy": "split" } }),
        json!({ "limit": 5000.0, "accept_at": 6000, "reject_beyond": 4000, "counter": { "strategy": "tier" } }),
        json!({ "limit": 99, "counter": { "strategy": "split" } }),
        json!({ "limit": 100_000_000_000i64, "counter": { "strategy": "split" } }),
        json!({ "limit": 100_000_000_001i64, "counter": { "strategy": "split" } }),
        json!({ "limit": 5000, "accept_at": null, "reject_beyond": null, "counter": { "strategy": "split" } }),
        json!({ "limit": 5000, "accept_at": 99, "counter": { "strategy": "split" } }),
        json!({ "limit": 5000, "max_auto_rounds": 100, "counter": { "strategy": "split" } }),
        json!({ "limit": 5000, "max_auto_rounds": 101, "counter": { "strategy": "split" } }),
        counter(json!({ "strategy": "step", "amount": 200 })),
        counter(json!({ "strategy": "step", "amount": 200.0, "fraction": null })),
        counter(json!({ "strategy": "step", "amount": null, "fraction": 0.5 })),
        counter(json!({ "strategy": "step", "amount": 200, "fraction": 0.5 })),
        counter(json!({ "strategy": "step" })),
        counter(json!({ "strategy": "step", "amount": null, "fraction": null })),
        counter(json!({ "strategy": "step", "amount": 0 })),
        counter(json!({ "strategy": "step", "fraction": 0 })),
        counter(json!({ "strategy": "step", "fraction": 1 })),
        counter(json!({ "strategy": "time" })),
        counter(json!({ "strategy": "time", "k": 1, "e": 100, "start": 6000 })),
        counter(json!({ "strategy": "time", "e": 100.5 })),
        counter(json!({ "strategy": "time", "e": 0 })),
        counter(json!({ "strategy": "time", "k": 1.5 })),
        counter(json!({ "strategy": "time", "start": null })),
        counter(json!({ "strategy": "time", "start": 99 })),
        counter(json!({ "strategy": "tit_for_tat", "kindness": -1 })),
        counter(json!({ "strategy": "tit_for_tat", "kindness": 1.5 })),
        counter(json!({ "strategy": "closer" })),
        counter(json!({ "strategy": "closer", "e": 0.2 })),
    ];
    for body in bodies {
        assert_eq!(is_valid(&schema("Policy"), &body), accepted(&body), "{body}");
    }
}

#[test]
fn the_documented_bounds_are_the_servers() {
    let limits = AmountLimits::default();
    for amount in [99, 100, 100_000_000_000i64, 100_000_000_001] {
        let accepted = RawAmount::from(amount).validate(limits).is_ok();
        assert_eq!(is_valid(&schema("AmountInput"), &json!(amount)), accepted, "{amount}");
    }
    for price in [json!(0.99), json!(1), json!(20.1), json!(1_000_000_000), json!(1_000_000_000.01)] {
        let raw = serde_json::from_value::<RawAmount>(price.clone()).unwrap();
        let accepted = money::amount_from_price(raw, limits).is_ok();
        assert_eq!(is_valid(&schema("CompatPriceInput"), &price), accepted, "{price}");
    }
    for micros in [999_999i64, 1_000_000, 1_005_000, 1_000_000_000_000_000, 1_000_000_000_010_000, 20_000_000] {
        let accepted = money::amount_from_micros(micros.into(), limits).is_ok();
        let money = json!({ "amount_micros": micros, "currency": "USD" });
        assert_eq!(is_valid(&schema("CompatMoneyInput"), &money), accepted, "{micros}");
    }
    let events = &spec()["paths"]["/v1/events"]["get"]["parameters"];
    let after = events.as_array().unwrap().iter().find(|p| p["name"] == "after").expect("after");
    assert_eq!(after["schema"]["maximum"], json!(i64::MAX), "the largest event id the server reads");
}
