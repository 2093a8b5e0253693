//! `/v1/webhooks`: endpoints that receive an agent's events.

use super::Endpoint;

pub fn endpoints() -> Vec<Endpoint> {
    Vec::new()
}
