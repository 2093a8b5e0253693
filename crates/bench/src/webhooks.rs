//! `haggle bench --workload webhooks`: webhook deliveries per second from one instance.
//!
//! The bench runs its own receiver on 127.0.0.1 (the server must allow private targets:
//! `HAGGLE_WEBHOOK_ALLOW_PRIVATE=true`), which checks every signature. One seller subscribes a
//! webhook to it; `--concurrency` buyers then place and withdraw bids on the seller's listings
//! as fast as they can, two events for the seller each time, until `--deliveries` events have
//! been made. The figures: how fast events were made, and how fast they were delivered, from
//! the first delivery to the last. When the last delivery comes well after the last event was
//! made, the deliveries were the bottleneck and their rate is the worker's capacity.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use uuid::Uuid;

use super::api;
use super::driver::{self, Deal, PhaseWorker, Unit};
use super::report::yes_no;
use super::stats::Recorder;
use haggle_client::{Client, NewListing, NewWebhook, Placement};

/// Threads a buyer may open on one listing before the bench gives it a new one.
const THREADS_PER_LISTING: i64 = 100;

#[derive(Default)]
struct Received {
    arrivals: Vec<(Instant, i64)>,
    bad_signatures: u64,
}

#[derive(Clone)]
struct Receiver {
    secret: Arc<Mutex<String>>,
    received: Arc<Mutex<Received>>,
}

async fn receive(State(receiver): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let at = Instant::now();
    let signature = headers.get("haggle-signature").and_then(|v| v.to_str().ok()).unwrap_or("");
    let secret = receiver.secret.lock().expect("secret").clone();
    let now = chrono::Utc::now().timestamp();
    let valid = haggle_api::signature::verify(&secret, signature, &body, now, Duration::from_secs(300));
    let event_id = headers.get("haggle-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let mut received = receiver.received.lock().expect("received");
    match (valid, event_id) {
        (true, Some(id)) => received.arrivals.push((at, id)),
        _ => received.bad_signatures += 1,
    }
    StatusCode::NO_CONTENT
}

async fn new_listing(seller: &Client) -> anyhow::Result<Uuid> {
    let listing = NewListing {
        quantity: Some(1000),
        max_threads_per_buyer: Some(THREADS_PER_LISTING),
        ..NewListing::new("webhook bench", 100_000)
    };
    Ok(seller.create_listing(&listing).await?.id)
}

/// A buyer making two events for the seller a unit: a placement and its withdrawal, on the
/// seller's listing it has, or a new one when that one has taken all its threads.
struct EventMaker {
    buyer: Client,
    seller: Client,
    listing: Option<Uuid>,
    threads: i64,
}

impl EventMaker {
    async fn make_two_events(&mut self) -> anyhow::Result<()> {
        let listing = match self.listing {
            Some(listing) if self.threads < THREADS_PER_LISTING => listing,
            _ => {
                let listing = new_listing(&self.seller).await?;
                self.listing = Some(listing);
                self.threads = 0;
                listing
            }
        };
        let placed = self.buyer.place_bid(listing, &Placement::new(50_000)).await?;
        self.threads += 1;
        self.buyer.withdraw(placed.bid.id).await?;
        Ok(())
    }
}

impl PhaseWorker for EventMaker {
    type Record = Recorder;

    /// The events are what is measured, not the calls: any failure ends the run.
    async fn run_unit(&mut self, _: &mut Recorder) -> Unit {
        match self.make_two_events().await {
            Ok(()) => Unit::Completed,
            Err(error) => Unit::Stopped(format!("{error:#}")),
        }
    }
}

pub async fn run(
    client: &Client,
    admin: &Client,
    concurrency: usize,
    deliveries: u64,
    idempotency_keys: bool,
) -> anyhow::Result<()> {
    let run_id = chrono::Utc::now().format("%Y%m%dT%H%M%S").to_string();
    let receiver = Receiver { secret: Default::default(), received: Default::default() };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("binding the bench's receiver")?;
    let address = listener.local_addr()?;
    let app = axum::Router::new().route("/hook", axum::routing::post(receive)).with_state(receiver.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let seller = client.with_api_key(api::register(client, &format!("webhooks-{run_id}-seller")).await?);
    let webhook = NewWebhook { url: format!("http://{address}/hook"), events: vec!["*".to_owned()] };
    let created = seller
        .create_webhook(&webhook)
        .await
        .context("subscribing the bench's receiver (the server must run with HAGGLE_WEBHOOK_ALLOW_PRIVATE=true)")?;
    *receiver.secret.lock().expect("secret") = created.secret;
    let mut buyers = Vec::new();
    for index in 0..concurrency {
        let key = api::register_buyer(client, admin, &format!("webhooks-{run_id}-buyer{index}")).await?;
        buyers.push(client.with_api_key(key));
    }
    let units = deliveries.div_ceil(2);
    eprintln!("[webhooks] {concurrency} buyers make {} events for one seller's webhook at {address}", units * 2);

    let makers = buyers
        .into_iter()
        .map(|buyer| EventMaker { buyer, seller: seller.clone(), listing: None, threads: 0 })
        .collect();
    let started = Instant::now();
    let (_, recorded) = driver::run_phase(Deal::Pool, makers, units, None).await?;
    if let Some(stopped) = recorded.stopped.first() {
        bail!("{stopped}");
    }
    let made = started.elapsed();
    // The listings the workers created are events of the seller's too (none: listing creation
    // publishes nothing), so exactly `units * 2` deliveries are expected.
    let expected = units * 2;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (count, bad) = {
            let received = receiver.received.lock().expect("received");
            (received.arrivals.len() as u64, received.bad_signatures)
        };
        if bad > 0 {
            bail!("{bad} deliveries had a bad signature");
        }
        if count >= expected {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {count} of {expected} deliveries arrived within 5 minutes");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let received = receiver.received.lock().expect("received");
    let unique: HashSet<i64> = received.arrivals.iter().map(|(_, id)| *id).collect();
    let first = received.arrivals.iter().map(|(at, _)| *at).min().expect("deliveries arrived");
    let last = received.arrivals.iter().map(|(at, _)| *at).max().expect("deliveries arrived");
    let delivering = last.duration_since(first);
    println!(
        "webhook deliveries from {} ({} buyers making events; idempotency keys: {})",
        client.base_url(),
        concurrency,
        yes_no(idempotency_keys)
    );
    println!(
        "events made:        {expected} in {:.2} s = {:.0} events/s",
        made.as_secs_f64(),
        expected as f64 / made.as_secs_f64()
    );
    println!(
        "deliveries:         {} ({} distinct events, every signature valid) in {:.2} s = {:.0} deliveries/s",
        received.arrivals.len(),
        unique.len(),
        delivering.as_secs_f64(),
        received.arrivals.len() as f64 / delivering.as_secs_f64()
    );
    let made_at = started + made;
    let after: Vec<Instant> = received.arrivals.iter().map(|(at, _)| *at).filter(|at| *at > made_at).collect();
    let drain = last.saturating_duration_since(made_at);
    println!(
        "backlog drained:    {} deliveries after the last event was made, in {:.2} s = {:.0} deliveries/s",
        after.len(),
        drain.as_secs_f64(),
        after.len() as f64 / drain.as_secs_f64().max(f64::EPSILON)
    );
    Ok(())
}
