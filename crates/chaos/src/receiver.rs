//! The webhook receiver: a small HTTP server on 127.0.0.1 that records every delivery's
//! `Haggle-Event-Id` for the webhook it came to, after checking its signature.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use tokio_util::sync::CancellationToken;

/// What arrived for one webhook.
#[derive(Debug, Default, Clone)]
pub struct Arrivals {
    /// Event id → deliveries of it.
    pub events: BTreeMap<i64, u32>,
    pub deliveries: u64,
    /// Deliveries whose signature did not verify, or that carried no event id.
    pub bad: Vec<String>,
}

#[derive(Clone, Default)]
pub struct Receiver {
    secrets: Arc<Mutex<BTreeMap<usize, String>>>,
    arrivals: Arc<Mutex<BTreeMap<usize, Arrivals>>>,
}

impl Receiver {
    /// Serves until `stop`; gives the address webhooks post to (`http://ADDR/hooks/N`).
    pub async fn start(stop: CancellationToken) -> anyhow::Result<(Receiver, SocketAddr)> {
        let receiver = Receiver::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let app =
            axum::Router::new().route("/hooks/{index}", axum::routing::post(receive)).with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await });
        Ok((receiver, address))
    }

    /// The signing secret of webhook `index`, as shown when it was created.
    pub fn expect(&self, index: usize, secret: String) {
        self.secrets.lock().expect("secrets").insert(index, secret);
    }

    pub fn arrivals(&self) -> BTreeMap<usize, Arrivals> {
        self.arrivals.lock().expect("arrivals").clone()
    }

    pub fn deliveries(&self) -> u64 {
        self.arrivals.lock().expect("arrivals").values().map(|a| a.deliveries).sum()
    }
}

async fn receive(
    State(receiver): State<Receiver>,
    Path(index): Path<usize>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok()).unwrap_or("");
    let secret = receiver.secrets.lock().expect("secrets").get(&index).cloned().unwrap_or_default();
    let now = chrono::Utc::now().timestamp();
    let signed = haggle_api::signature::verify(
        &secret,
        header(haggle_api::signature::HEADER),
        &body,
        now,
        Duration::from_secs(300),
    );
    let event_id = header("haggle-event-id").parse::<i64>().ok();
    let mut arrivals = receiver.arrivals.lock().expect("arrivals");
    let arrivals = arrivals.entry(index).or_default();
    arrivals.deliveries += 1;
    match (signed, event_id) {
        (true, Some(id)) => *arrivals.events.entry(id).or_default() += 1,
        (false, _) => arrivals.bad.push(format!(
            "delivery {} (event {:?}): bad signature",
            header("haggle-delivery-id"),
            event_id
        )),
        (true, None) => arrivals.bad.push(format!("delivery {}: no Haggle-Event-Id", header("haggle-delivery-id"))),
    }
    StatusCode::NO_CONTENT
}
