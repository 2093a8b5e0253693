//! Where the service answers.

/// Where the public Agent Card is served.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";
/// The JSON-RPC binding's endpoint; the service is mounted here, the HTTP+JSON binding below it.
pub const PATH: &str = "/a2a";
/// The HTTP+JSON binding's base URL path.
pub const REST_PATH: &str = "/a2a/rest";

/// Every route and its methods, as the server's OpenAPI document describes them. Any other path
/// under [`REST_PATH`] is answered with the binding's error (push notifications' routes with
/// `PUSH_NOTIFICATION_NOT_SUPPORTED`).
pub const METHODS: [(&str, &str); 7] = [
    ("POST", "/a2a"),
    ("POST", "/a2a/rest/message:send"),
    ("POST", "/a2a/rest/message:stream"),
    ("GET", "/a2a/rest/tasks"),
    ("GET", "/a2a/rest/tasks/{name}"),
    ("POST", "/a2a/rest/tasks/{name}"),
    ("GET", "/a2a/rest/extendedAgentCard"),
];
