//! Moves decided on what an instance remembers of the negotiations its own moves wrote, across
//! two `haggle serve` processes on one database: when the other instance moved first, or the
//! seller changed the listing through it, the remembering instance's move is refused by its
//! compare-and-set and made again on current rows, exactly as a move that read them; racing
//! moves through both instances have exactly one winner. Each process's scrape shows how many
//! moves it decided from memory, so the fast path is known to have run.

use futures::future::join_all;
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::{PgPool, Row};

use crate::served::{Metrics, Server};
use crate::support::TestDb;

const ENV: &[(&str, &str)] = &[("HAGGLE_RATE_LIMIT", "0"), ("HAGGLE_SWEEP_INTERVAL", "0")];

struct Market {
    /// For reading what the moves wrote.
    pool: PgPool,
    /// The database, dropped with the market.
    _db: TestDb,
    /// The instance whose memory goes stale.
    a: Server,
    /// The instance the other moves go through.
    b: Server,
    seller: String,
    buyer: String,
    listing: String,
}

impl Market {
    async fn open(terms: Value) -> Market {
        let db = TestDb::create().await;
        let a = Server::spawn(&db, ENV);
        let b = Server::spawn(&db, ENV);
        let (_, seller) = a.agent("seller", None).await;
        let (_, buyer) = a.agent("buyer", Some("AGENCY")).await;
        let mut fields =
            json!({ "title": "Desk", "ask_amount": 100000, "quantity": 1000, "max_threads_per_buyer": 100 });
        fields.as_object_mut().unwrap().extend(terms.as_object().unwrap().clone());
        let (status, listing) = a.call(Method::POST, "/v1/listings", Some(&seller), Some(fields)).await;
        assert_eq!(status, 201, "{listing}");
        let listing = listing["id"].as_str().unwrap().to_owned();
        let pool = db.pool(1).await;
        Market { pool, _db: db, a, b, seller, buyer, listing }
    }

    /// The buyer's opening bid, placed through `server` (which then remembers it).
    async fn place(&self, server: &Server, amount: i64) -> String {
        self.place_as(server, &self.buyer, amount).await
    }

    async fn place_as(&self, server: &Server, buyer: &str, amount: i64) -> String {
        let (status, body) = self.try_place(server, buyer, amount).await;
        assert_eq!(status, 201, "{body}");
        body["bid"]["id"].as_str().unwrap().to_owned()
    }

    async fn try_place(&self, server: &Server, buyer: &str, amount: i64) -> (u16, Value) {
        let path = format!("/v1/listings/{}/bids", self.listing);
        server.call(Method::POST, &path, Some(buyer), Some(json!({ "amount": amount }))).await
    }

    async fn counter(&self, server: &Server, key: &str, bid: &str, amount: i64) -> (u16, Value) {
        server
            .call(Method::POST, &format!("/v1/bids/{bid}/counter"), Some(key), Some(json!({ "amount": amount })))
            .await
    }

    async fn answer(&self, server: &Server, key: &str, bid: &str, answer: &str) -> (u16, Value) {
        server.call(Method::POST, &format!("/v1/bids/{bid}/{answer}"), Some(key), None).await
    }

    /// The buyer ends the thread through B, answering or withdrawing its pending bid.
    async fn end(&self, pending: &str, how: &str) {
        self.end_as(&self.buyer, pending, how).await;
    }

    async fn end_as(&self, buyer: &str, pending: &str, how: &str) {
        let (status, body) = self.answer(&self.b, buyer, pending, how).await;
        assert_eq!(status, 200, "{body}");
    }

    async fn change_listing(&self, server: &Server, patch: Value) {
        let path = format!("/v1/listings/{}", self.listing);
        let (status, body) = server.call(Method::PATCH, &path, Some(&self.seller), Some(patch)).await;
        assert_eq!(status, 200, "{body}");
    }

    async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql).fetch_one(&self.pool).await.unwrap()
    }

    /// The lifetime, in seconds, the counter made on `bid` was given.
    async fn counter_lifetime(&self, bid: &str) -> i64 {
        let row = sqlx::query(
            "SELECT extract(epoch FROM expires_at - created_at)::bigint AS ttl FROM bids WHERE parent_bid_id = $1::uuid",
        )
        .bind(bid)
        .fetch_one(&self.pool)
        .await
        .unwrap();
        row.get("ttl")
    }
}

/// How many unlocked moves of `kind` the instance decided on `source` (`memory` or `database`)
/// since `before`.
fn reads(before: &Metrics, after: &Metrics, kind: &str, source: &str) -> f64 {
    let labels = [("kind", kind), ("source", source)];
    after.value("haggle_move_reads_total", &labels) - before.value("haggle_move_reads_total", &labels)
}

/// How many unlocked moves of `kind` the instance decided from its memory since `before`.
fn from_memory(before: &Metrics, after: &Metrics, kind: &str) -> f64 {
    reads(before, after, kind, "memory")
}

/// How many unlocked moves of `kind` the instance made again under locks since `before`, their
/// compare-and-set having failed or their decision from memory been a refusal.
fn retried(before: &Metrics, after: &Metrics, kind: &str) -> f64 {
    let labels = [("kind", kind), ("outcome", "retried")];
    after.value("haggle_moves_total", &labels) - before.value("haggle_moves_total", &labels)
}

#[tokio::test]
async fn a_move_on_a_bid_the_other_instance_answered_first_is_refused() {
    let market = Market::open(json!({})).await;
    let before = market.a.scrape().await;

    // The seller counters through B the opening A placed, then again through A, which still
    // remembers the opening as pending.
    let opening = market.place(&market.a, 60000).await;
    let (status, countered) = market.counter(&market.b, &market.seller, &opening, 90000).await;
    assert_eq!(status, 201, "{countered}");
    let (status, body) = market.counter(&market.a, &market.seller, &opening, 95000).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("invalid_transition")), "{body}");
    market.end(countered["bid"]["id"].as_str().unwrap(), "reject").await;

    // The buyer withdraws through B an opening A placed; the seller accepts it through A.
    let opening = market.place(&market.a, 61000).await;
    let (status, body) = market.answer(&market.b, &market.buyer, &opening, "withdraw").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = market.answer(&market.a, &market.seller, &opening, "accept").await;
    assert_eq!((status, body["code"].as_str()), (409, Some("invalid_transition")), "{body}");

    let after = market.a.scrape().await;
    assert_eq!(from_memory(&before, &after, "counters"), 1.0, "the counter was decided from memory");
    assert_eq!(from_memory(&before, &after, "acceptances"), 1.0, "the acceptance was decided from memory");
    // Refused because the move was made again under locks, not because memory said so.
    assert_eq!(retried(&before, &after, "counters"), 1.0, "the counter was made again under locks");
    assert_eq!(retried(&before, &after, "acceptances"), 1.0, "the acceptance was made again under locks");
    assert_eq!(market.count("SELECT count(*) FROM orders").await, 0);
    assert_eq!(market.count("SELECT count(*) FROM bids").await, 3, "two openings and one counter");
    assert_eq!(market.count("SELECT count(*) FROM bids WHERE status = 'PENDING'").await, 0);
}

#[tokio::test]
async fn a_counter_decided_on_listing_terms_changed_through_the_other_instance_follows_the_new_terms() {
    let market = Market::open(json!({ "bid_ttl_seconds": 600, "max_rounds": 10 })).await;
    let before = market.a.scrape().await;

    // Three buyers open threads through A, which remembers each opening with the listing's
    // terms as they were: a lifetime of 600 s, an ask of 100,000 and ten rounds.
    let mut buyers = vec![market.buyer.clone()];
    for name in ["second buyer", "third buyer"] {
        buyers.push(market.a.agent(name, Some("AGENCY")).await.1);
    }
    let mut openings = Vec::new();
    for buyer in &buyers {
        openings.push(market.place_as(&market.a, buyer, 60000).await);
    }

    // The bids' lifetime changed to 120 s through B; the counter through A is given 120 s.
    market.change_listing(&market.b, json!({ "bid_ttl_seconds": 120 })).await;
    let (status, body) = market.counter(&market.a, &market.seller, &openings[0], 90000).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        market.counter_lifetime(&openings[0]).await,
        120,
        "the counter was given the listing's current lifetime"
    );
    market.end_as(&buyers[0], body["bid"]["id"].as_str().unwrap(), "reject").await;

    // The ask, the seller's first position, lowered: a counter above the new ask is no
    // concession.
    market.change_listing(&market.b, json!({ "ask_amount": 80000 })).await;
    let (status, body) = market.counter(&market.a, &market.seller, &openings[1], 95000).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("not_a_concession")), "{body}");

    // The round limit lowered to one: the opening is a final offer.
    market.change_listing(&market.b, json!({ "max_rounds": 1 })).await;
    let (status, body) = market.counter(&market.a, &market.seller, &openings[2], 79000).await;
    assert_eq!(body["code"].as_str(), Some("final_offer"), "{status} {body}");

    let after = market.a.scrape().await;
    assert_eq!(from_memory(&before, &after, "counters"), 3.0, "each counter was decided from memory first");
    assert_eq!(
        retried(&before, &after, "counters"),
        3.0,
        "each was refused by its compare-and-set and made again under locks"
    );
    assert_eq!(market.count("SELECT count(*) FROM bids WHERE parent_bid_id IS NOT NULL").await, 1);
}

#[tokio::test]
async fn a_placement_on_a_listing_changed_through_the_other_instance_follows_the_listing_as_it_is() {
    let market = Market::open(json!({})).await;
    let mut buyers = Vec::new();
    for name in ["first", "second", "third", "fourth"] {
        buyers.push(market.a.agent(name, Some("AGENCY")).await.1);
    }
    let place = |buyer| market.try_place(&market.a, buyer, 60000);
    // A reads the listing for the first placement and remembers it.
    let (status, body) = place(&buyers[0]).await;
    assert_eq!(status, 201, "{body}");
    let before = market.a.scrape().await;

    // Negotiation kept through B to a tier above the buyers' own: A, remembering the listing open
    // to them, places, and the placement is refused as under locks (and A forgets the listing).
    market.change_listing(&market.b, json!({ "min_negotiation_tier": "ADVERTISER" })).await;
    let (status, body) = place(&buyers[1]).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("negotiation_not_allowed")), "{body}");
    // Read again, and remembered as closed to them.
    let (status, body) = place(&buyers[1]).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("negotiation_not_allowed")), "{body}");

    // Opened to every tier through B: A's memory would refuse, and the placement is decided
    // again on the listing as it is.
    market.change_listing(&market.b, json!({ "min_negotiation_tier": "PUBLIC" })).await;
    let (status, body) = place(&buyers[2]).await;
    assert_eq!(status, 201, "{body}");

    // Withdrawn through B.
    let withdraw = format!("/v1/listings/{}/withdraw", market.listing);
    let (status, body) = market.b.call(Method::POST, &withdraw, Some(&market.seller), None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = place(&buyers[3]).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("listing_unavailable")), "{body}");

    let after = market.a.scrape().await;
    let read = |source| reads(&before, &after, "placements", source);
    assert_eq!((read("memory"), read("database")), (2.0, 2.0), "the first and the third were decided from memory");
    assert_eq!(retried(&before, &after, "placements"), 1.0, "a placement was made again under locks");
    assert_eq!(market.count("SELECT count(*) FROM threads").await, 2);
}

#[tokio::test]
async fn a_retraction_decided_on_a_concession_rule_changed_through_the_other_instance_follows_the_new_rule() {
    let market = Market::open(json!({ "concession_rule": "none" })).await;
    let before = market.a.scrape().await;
    // A makes the seller's counter, and remembers it with the listing's rule as it was: `none`.
    let opening = market.place(&market.a, 60000).await;
    let (status, countered) = market.counter(&market.a, &market.seller, &opening, 90000).await;
    assert_eq!(status, 201, "{countered}");
    let countered = countered["bid"]["id"].as_str().unwrap().to_owned();

    // The rule made strict through B: A, deciding from memory, finds the buyer's retraction
    // legal; its compare-and-set refuses it, and made again under locks it is no concession.
    market.change_listing(&market.b, json!({ "concession_rule": "strict" })).await;
    let (status, body) = market.counter(&market.a, &market.buyer, &countered, 55000).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("not_a_concession")), "{body}");
    assert_eq!((body["min_amount"].as_i64(), body["max_amount"].as_i64()), (Some(60000), Some(89999)), "{body}");
    let after = market.a.scrape().await;
    assert_eq!(from_memory(&before, &after, "counters"), 2.0, "the retraction was decided from memory");
    assert_eq!(retried(&before, &after, "counters"), 1.0, "its compare-and-set failed: made again under locks");
    assert_eq!(market.count("SELECT count(*) FROM bids").await, 2, "the refused retraction wrote nothing");

    // And `none` again through B: the retraction is made.
    market.change_listing(&market.b, json!({ "concession_rule": "none" })).await;
    let (status, body) = market.counter(&market.a, &market.buyer, &countered, 55000).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["bid"]["amount"], 55000);
}

#[tokio::test]
async fn counters_accepts_and_withdrawals_racing_through_two_instances_have_one_winner() {
    let market = Market::open(json!({ "bid_ttl_seconds": 600 })).await;
    let before = market.a.scrape().await;
    let (seller, buyer) = (&market.seller, &market.buyer);
    let mut winners = std::collections::BTreeMap::<&str, usize>::new();
    for round in 0..16 {
        let opening = market.place(&market.a, 60000 + round).await;
        // A remembers the opening with the listing's lifetime as it was; it changes every round.
        let ttl = if round % 2 == 0 { 300 } else { 600 };
        market.change_listing(&market.b, json!({ "bid_ttl_seconds": ttl })).await;
        // Who goes first through A varies, so that each kind of move gets A's memory in turn.
        let moves: Vec<(&str, &Server, &str)> = match round % 3 {
            0 => vec![("counter", &market.a, seller), ("accept", &market.b, seller), ("withdraw", &market.b, buyer)],
            1 => vec![("accept", &market.a, seller), ("counter", &market.b, seller), ("withdraw", &market.b, buyer)],
            _ => vec![("withdraw", &market.a, buyer), ("counter", &market.a, seller), ("accept", &market.b, seller)],
        };
        let moves: Vec<(&str, &Server, &str)> = moves.iter().chain(moves.iter()).copied().collect();
        let (market, opening) = (&market, &opening);
        let answers = join_all(moves.iter().map(|&(what, server, key)| async move {
            let answer = match what {
                "counter" => market.counter(server, key, opening, 90000).await,
                answer => market.answer(server, key, opening, answer).await,
            };
            (what, answer)
        }))
        .await;
        let won: Vec<&str> =
            answers.iter().filter(|(_, (status, _))| (200..300).contains(status)).map(|(what, _)| *what).collect();
        assert_eq!(won.len(), 1, "round {round}: {answers:?}");
        for (what, (status, body)) in &answers {
            assert!(
                (200..300).contains(status) || (*status == 409 && body["code"] == "invalid_transition"),
                "round {round}, {what}: {status} {body}"
            );
        }
        *winners.entry(won[0]).or_default() += 1;
        let orders = market.count(&format!("SELECT count(*) FROM orders WHERE bid_id = '{opening}'")).await;
        assert_eq!(orders, i64::from(won[0] == "accept"), "round {round}");
        let counters = market.count(&format!("SELECT count(*) FROM bids WHERE parent_bid_id = '{opening}'")).await;
        assert_eq!(counters, i64::from(won[0] == "counter"), "round {round}");
        if won[0] == "counter" {
            assert_eq!(market.counter_lifetime(opening).await, ttl, "round {round}: never the stale lifetime");
            // The thread's counter is pending; end it for the next round.
            let (_, (_, countered)) = answers.iter().find(|(_, (status, _))| *status == 201).unwrap();
            market.end(countered["bid"]["id"].as_str().unwrap(), "reject").await;
        }
    }
    let after = market.a.scrape().await;
    let remembered = ["counters", "acceptances"].iter().map(|kind| from_memory(&before, &after, kind)).sum::<f64>();
    assert!(remembered >= 8.0, "A decided moves from memory: {remembered}");
    // Every round A decided from a memory the other instance had made stale (the lifetime,
    // the bid's status), so some of those moves were made again under locks.
    let again = ["counters", "acceptances"].iter().map(|kind| retried(&before, &after, kind)).sum::<f64>();
    assert!(again >= 1.0, "no move decided from A's stale memory was made again under locks");
    assert_eq!(market.count("SELECT count(*) FROM orders").await, winners.get("accept").copied().unwrap_or(0) as i64);
    assert_eq!(market.count("SELECT count(*) FROM threads WHERE status = 'ACTIVE'").await, 0);
}
