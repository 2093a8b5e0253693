//! Who a call acts as, and the client that acts as them.

use std::sync::Arc;
use std::time::Duration;

use haggle_client::{Carried, Client};
use uuid::Uuid;

use crate::recent::Recent;

/// The agent a request acts as: the API key it carried, the agent it belongs to, and what the
/// REST calls made for it carry of it (its client's address), so that limits and logs that
/// count by address count them as that client's. The server's authentication puts it into the
/// request's extensions.
#[derive(Clone)]
pub struct Caller {
    pub api_key: String,
    pub agent_id: Uuid,
    pub carried: Carried,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller").field("api_key", &"<redacted>").field("agent_id", &self.agent_id).finish()
    }
}

/// The service's shared state: the in-process client, as nobody until a request names its
/// caller.
#[derive(Clone)]
pub(crate) struct Agent2Agent {
    client: Client,
    wait: Duration,
    recent: Arc<Recent>,
}

/// A call's agent, and a client that acts as it.
#[derive(Clone)]
pub(crate) struct Acting {
    pub client: Client,
    pub agent_id: Uuid,
    /// How long a blocking send waits for the other side.
    pub wait: Duration,
    /// What this instance remembers of recent negotiations.
    pub recent: Arc<Recent>,
}

impl Agent2Agent {
    pub fn new(client: Client, wait: Duration) -> Agent2Agent {
        Agent2Agent { client, wait, recent: Arc::default() }
    }

    pub fn acting(&self, caller: &Caller) -> Acting {
        Acting {
            client: self.client.with_api_key(caller.api_key.clone()).carrying(caller.carried.clone()),
            agent_id: caller.agent_id,
            wait: self.wait,
            recent: Arc::clone(&self.recent),
        }
    }
}
