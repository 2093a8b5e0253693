//! openapi.yaml as a test oracle: every response a test receives must be documented for its
//! route and status, and its body must validate against the documented schema.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use reqwest::Method;
use serde_json::Value;

use crate::support::Resp;

pub fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml")).expect("openapi.yaml");
        serde_norway::from_str(&text).expect("openapi.yaml is valid YAML")
    })
}

/// Whether a concrete path matches an OpenAPI path template, and how many segments are literal.
fn matches(template: &str, path: &str) -> Option<usize> {
    let template: Vec<&str> = template.split('/').collect();
    let path: Vec<&str> = path.split('/').collect();
    if template.len() != path.len() {
        return None;
    }
    let mut literal = 0;
    for (t, p) in template.iter().zip(&path) {
        if t.starts_with('{') && t.ends_with('}') {
            if p.is_empty() {
                return None;
            }
        } else if t == p {
            literal += 1;
        } else {
            return None;
        }
    }
    Some(literal)
}

/// The path template a concrete path falls under, preferring the most literal match.
pub fn template_for(path: &str) -> Option<&'static str> {
    spec()["paths"]
        .as_object()?
        .keys()
        .filter_map(|template| matches(template, path).map(|score| (score, template.as_str())))
        .max_by_key(|(score, _)| *score)
        .map(|(_, template)| template)
}

/// Follows a local `$ref` such as `#/components/responses/NotFound`.
pub fn resolve(value: &Value) -> &Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.strip_prefix('#').expect("local reference");
            resolve(spec().pointer(pointer).unwrap_or_else(|| panic!("unresolved reference {reference}")))
        }
        None => value,
    }
}

fn validator(schema: &Value) -> Arc<jsonschema::Validator> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> = OnceLock::new();
    let key = schema.to_string();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(validator) = cache.lock().unwrap().get(&key) {
        return validator.clone();
    }
    let mut root = schema.clone();
    root.as_object_mut().expect("schema object").insert("components".into(), spec()["components"].clone());
    let validator = Arc::new(
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&root)
            .unwrap_or_else(|e| panic!("invalid schema {key}: {e}")),
    );
    cache.lock().unwrap().insert(key, validator.clone());
    validator
}

/// Whether `instance` is valid against `schema` (which may refer to the document's components).
pub fn is_valid(schema: &Value, instance: &Value) -> bool {
    validator(schema).is_valid(instance)
}

fn validate(schema: &Value, body: &Value, context: &str) {
    let validator = validator(schema);
    let errors: Vec<String> = validator.iter_errors(body).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{context}: body does not match openapi.yaml:\n  {}\nbody: {body}", errors.join("\n  "));
}

/// Checks a response against the document; panics with the reason if it is not documented.
pub fn check_response(method: &Method, path: &str, content_type: &str, resp: &Resp) {
    let path = path.split('?').next().unwrap_or(path);
    let operation = template_for(path).and_then(|template| {
        spec()["paths"][template].get(method.as_str().to_lowercase()).map(|operation| (template, operation))
    });
    let Some((template, operation)) = operation else {
        // No such route or method: the router's own problem answers.
        assert!(
            matches!(resp.status, 404 | 405),
            "{method} {path} is not in openapi.yaml but answered {}",
            resp.status
        );
        // The compatibility routes' prefix answers in the IAB envelope.
        let schema = if path.starts_with("/api/v1/") { "IabError" } else { "Problem" };
        validate(
            &serde_json::json!({"$ref": format!("#/components/schemas/{schema}")}),
            &resp.body,
            "unrouted request",
        );
        return;
    };
    let context = format!("{method} {template} -> {}", resp.status);
    let responses = &operation["responses"];
    let documented = responses
        .get(resp.status.to_string())
        .or_else(|| responses.get(format!("{}XX", resp.status / 100)))
        .or_else(|| responses.get("default"))
        .unwrap_or_else(|| panic!("{context}: status not documented; body: {}", resp.body));
    let documented = resolve(documented);
    let media = content_type.split(';').next().unwrap_or("").trim();
    match documented.get("content") {
        Some(content) => {
            let schema = content
                .get(media)
                .unwrap_or_else(|| panic!("{context}: content type {media:?} not documented"))
                .get("schema");
            if let Some(schema) = schema
                && media.ends_with("json")
            {
                validate(schema, &resp.body, &context);
            }
        }
        None => assert!(
            resp.body.as_str().is_some_and(str::is_empty),
            "{context}: documented without a body but answered {}",
            resp.body
        ),
    }
}
