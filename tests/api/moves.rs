//! Moves made without locks and in batches: each move keeps its own compare-and-set inside a
//! shared statement, a move that cannot be made unlocked writes nothing and asks for locks, and
//! the locked retry reports or records what happened.

use chrono::Utc;
use haggle_domain::Tier;
use haggle_domain::bid::{Proposal, Transition};
use haggle_domain::money::{Amount, AmountLimits};
use haggle_server::db::agents::Caller;
use haggle_server::db::idempotency::MoveAnswer;
use haggle_server::db::moves::{self, CounterMove, MoveEvent};
use haggle_server::db::rows::NewBid;
use haggle_server::events::{NewEvent, Outbox};
use haggle_server::market::negotiation::{self, Answer};
use haggle_server::market::{Access, Batcher, Error, Rules};
use serde_json::json;
use uuid::Uuid;

use crate::support::{Agent, TestApp};

fn caller(agent: &Agent, tier: Tier) -> Caller {
    Caller { id: agent.id.parse().unwrap(), tier, approval_rules: false }
}

fn offer(amount: i64) -> Proposal {
    Proposal::of(amount)
}

/// A counter to `bid` by the seller at `amount`, as the market works it out.
async fn seller_counter(app: &TestApp, bid: &str, amount: i64) -> (CounterMove, NewEvent) {
    let answered =
        sqlx::query_as::<_, (Uuid, Uuid, String)>("SELECT id, thread_id, currency FROM bids WHERE id = $1::uuid")
            .bind(bid)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let thread: haggle_server::db::Thread = sqlx::query_scalar::<_, sqlx::types::Json<haggle_server::db::Thread>>(
        "SELECT row_to_json(t) FROM threads t WHERE id = $1",
    )
    .bind(answered.1)
    .fetch_one(&app.pool)
    .await
    .unwrap()
    .0;
    let now: chrono::DateTime<Utc> = sqlx::query_scalar("SELECT now()").fetch_one(&app.pool).await.unwrap();
    let opening = NewBid {
        id: Uuid::now_v7(),
        author_id: thread.seller_id,
        amount: Amount::new(amount, AmountLimits::default()).unwrap(),
        currency: answered.2.parse().unwrap(),
        message: Some("meet me here"),
        terms: None,
        is_final: false,
        expires_in: 600,
    };
    let counter = opening.row(thread.id, Some(answered.0), 2, now);
    let after = haggle_server::db::Thread {
        rounds: 2,
        last_bid_id: counter.id,
        expires_at: Some(counter.expires_at),
        updated_at: now,
        ..thread.clone()
    };
    let event = NewEvent::bid(&counter, &after);
    (
        CounterMove {
            thread_id: thread.id,
            bid_id: answered.0,
            now,
            effect: Transition::Counter.into(),
            counter,
            mediation: None,
            decided_on: None,
            answer: None,
        },
        event,
    )
}

#[tokio::test]
async fn counters_made_in_one_statement_each_keep_their_own_compare_and_set() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let mut pending = Vec::new();
    for n in 0..4 {
        let buyer = app.buyer(&format!("buyer {n}")).await;
        let listing = app.listing(&seller, json!({})).await;
        pending.push(app.place(&buyer, &listing, 80000).await);
    }
    // The third bid was answered after its move was worked out: that move must not be made.
    let mut worked_out = Vec::new();
    for bid in &pending {
        worked_out.push(seller_counter(&app, bid, 95000).await);
    }
    app.post(&format!("/v1/bids/{}/reject", pending[2]), &seller.key, json!({})).await.expect(200);
    let events_before = app.count("SELECT count(*) FROM events").await;

    let counters: Vec<CounterMove> = worked_out.iter().map(|(counter, _)| counter.clone()).collect();
    let events: Vec<MoveEvent> =
        worked_out.iter().enumerate().map(|(index, (_, event))| MoveEvent { index, event }).collect();
    let mut conn = app.pool.acquire().await.unwrap();
    let made = moves::counter(&mut conn, &counters, &events).await.unwrap();

    assert_eq!(made.iter().map(Option::is_some).collect::<Vec<_>>(), [true, true, false, true]);
    for (made, (counter, _)) in made.iter().zip(&worked_out) {
        let Some(made) = made else { continue };
        let (bid, thread) = &made.rows;
        assert_eq!(bid, &counter.counter, "the stored counter is the one worked out");
        assert_eq!((thread.rounds, thread.last_bid_id), (2, bid.id));
        assert!(!made.queued, "no policy, no task");
    }
    // The refused move left its thread as the rejection did, with no counter.
    assert_eq!(app.count(format!("SELECT count(*) FROM bids WHERE parent_bid_id = '{}'", pending[2])).await, 0);
    assert_eq!(
        app.count(format!("SELECT count(*) FROM bids WHERE id = '{}' AND status = 'REJECTED'", pending[2])).await,
        1
    );
    // Events for the three moves made, none for the refused one (the rejection wrote its own).
    let events_after_moves = app.count("SELECT count(*) FROM events").await;
    assert_eq!(events_after_moves - events_before, 3);
    assert_eq!(
        app.count(format!("SELECT count(*) FROM events WHERE bid_id = '{}'", worked_out[2].0.counter.id)).await,
        0
    );
}

/// A keyed request's answer under the key `key`, by `agent`.
fn answer(agent: &Agent, key: u8) -> MoveAnswer {
    MoveAnswer {
        agent_id: agent.id.parse().unwrap(),
        key_digest: vec![key; 32],
        request_digest: vec![7; 32],
        status_code: 201,
        content_type: "application/json",
        body: format!("{{\"key\":{key}}}").into_bytes(),
    }
}

#[tokio::test]
async fn a_statement_stores_the_answers_of_the_moves_it_made_and_makes_none_if_a_key_is_taken() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let mut pending = Vec::new();
    for n in 0..5 {
        let buyer = app.buyer(&format!("buyer {n}")).await;
        let listing = app.listing(&seller, json!({})).await;
        pending.push(app.place(&buyer, &listing, 80000).await);
    }
    let mut worked_out = Vec::new();
    for (n, bid) in pending.iter().enumerate() {
        let (mut counter, event) = seller_counter(&app, bid, 95000).await;
        // Keyed, all but the second.
        counter.answer = (n != 1).then(|| answer(&seller, n as u8 + 1));
        worked_out.push((counter, event));
    }
    // The third bid was answered after its move was worked out: its answer must not be stored.
    app.post(&format!("/v1/bids/{}/reject", pending[2]), &seller.key, json!({})).await.expect(200);
    let make = |moves: &[(CounterMove, NewEvent)]| {
        let counters: Vec<CounterMove> = moves.iter().map(|(counter, _)| counter.clone()).collect();
        let events: Vec<(usize, NewEvent)> =
            moves.iter().enumerate().map(|(index, (_, event))| (index, event.clone())).collect();
        (counters, events)
    };
    let (counters, events) = make(&worked_out[..3]);
    let events: Vec<MoveEvent> = events.iter().map(|(index, event)| MoveEvent { index: *index, event }).collect();
    let mut conn = app.pool.acquire().await.unwrap();
    let made = moves::counter(&mut conn, &counters, &events).await.unwrap();
    assert_eq!(made.iter().map(Option::is_some).collect::<Vec<_>>(), [true, true, false]);
    let stored: Vec<(Vec<u8>, Vec<u8>)> =
        sqlx::query_as("SELECT key_digest, body FROM idempotency_keys ORDER BY key_digest")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(stored, [(vec![1; 32], b"{\"key\":1}".to_vec())], "the answer of the one keyed move made");

    // A statement whose key is stored already makes none of its moves: each is made again
    // under locks, where the key's answer is found.
    let mut taken = worked_out[3].clone();
    taken.0.answer = Some(answer(&seller, 1));
    let before = app.snapshot().await;
    let (counters, events) = make(&[worked_out[4].clone(), taken]);
    let events: Vec<MoveEvent> = events.iter().map(|(index, event)| MoveEvent { index: *index, event }).collect();
    let refused = moves::counter(&mut conn, &counters, &events).await;
    assert!(
        matches!(&refused, Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("23505")),
        "{refused:?}"
    );
    assert_eq!(app.snapshot().await, before, "nothing of either move was written");
}

#[tokio::test]
async fn an_unlocked_move_that_cannot_be_made_writes_nothing_and_the_locked_one_says_why() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let buyer = app.buyer("buyer").await;
    let listing = app.listing(&seller, json!({})).await;
    let bid = app.place(&buyer, &listing, 80000).await;
    let bid_id: Uuid = bid.parse().unwrap();
    let mut workers = tokio::task::JoinSet::new();
    let batcher = Batcher::start(app.pool.clone(), 1, 0, &mut workers);
    let seller_caller = caller(&seller, Tier::Public);
    let mut conn = app.pool.acquire().await.unwrap();

    // A live bid is countered unlocked, through the batcher.
    let mut events = Outbox::new();
    let (countered, _) = negotiation::counter(
        &mut conn,
        &mut events,
        Access::Unlocked(batcher.clone()),
        seller_caller,
        bid_id,
        &offer(95000),
        Rules::default(),
    )
    .await
    .expect("an unlocked counter on a live bid is made");
    assert_eq!(events.written().events, 1);
    assert!(events.pending().is_empty());

    // The buyer's answer found past its deadline: unlocked, nothing is written...
    sqlx::query("UPDATE bids SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(countered.id)
        .execute(&app.pool)
        .await
        .unwrap();
    let before = app.snapshot().await;
    let buyer_caller = caller(&buyer, Tier::Agency);
    let mut events = Outbox::new();
    let unlocked = negotiation::answer(
        &mut conn,
        &mut events,
        Access::Unlocked(batcher.clone()),
        buyer_caller,
        countered.id,
        Answer::Accept,
    )
    .await;
    assert!(matches!(unlocked, Err(Error::NeedsLocks)), "{unlocked:?}");
    assert_eq!(app.snapshot().await, before, "the unlocked attempt wrote nothing");

    // ...and under locks the expiry is recorded and reported.
    let mut tx = app.pool.begin().await.unwrap();
    let mut events = Outbox::new();
    let locked =
        negotiation::answer(&mut tx, &mut events, Access::Locked, buyer_caller, countered.id, Answer::Accept).await;
    events.flush(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    assert!(matches!(locked, Err(Error::Rejected(haggle_domain::Rejection::BidExpired))), "{locked:?}");
    assert_eq!(
        app.count(format!("SELECT count(*) FROM bids WHERE id = '{}' AND status = 'EXPIRED'", countered.id)).await,
        1
    );
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);
}

#[tokio::test]
async fn the_last_unit_is_sold_under_locks_and_ends_the_other_threads() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let listing = app.listing(&seller, json!({ "quantity": 1 })).await;
    let first = app.buyer("first").await;
    let second = app.buyer("second").await;
    let bid = app.place(&first, &listing, 90000).await;
    app.place(&second, &listing, 85000).await;
    let mut workers = tokio::task::JoinSet::new();
    let batcher = Batcher::start(app.pool.clone(), 1, 0, &mut workers);
    let mut conn = app.pool.acquire().await.unwrap();

    let mut events = Outbox::new();
    let unlocked = negotiation::answer(
        &mut conn,
        &mut events,
        Access::Unlocked(batcher),
        caller(&seller, Tier::Public),
        bid.parse().unwrap(),
        Answer::Accept,
    )
    .await;
    assert!(matches!(unlocked, Err(Error::NeedsLocks)), "the last unit ends other threads: {unlocked:?}");
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);

    // Through the API the request takes its locks and the sale closes the other thread.
    app.post(&format!("/v1/bids/{bid}/accept"), &seller.key, json!({})).await.expect(200);
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM threads WHERE status = 'CLOSED'").await, 1);
    assert_eq!(app.count(format!("SELECT count(*) FROM listings WHERE id = '{listing}' AND status = 'SOLD'")).await, 1);
}

#[tokio::test]
async fn a_placement_takes_no_lock_of_its_own_with_a_key_or_without() {
    let app = TestApp::spawn().await;
    let seller = app.register("seller").await;
    let buyer = app.buyer("buyer").await;
    let listing = app.listing(&seller, json!({})).await;
    // A transaction holds the advisory lock that a placement under locks takes first.
    let (space, key) = haggle_server::db::listings::placement_lock(listing.parse().unwrap(), buyer.id.parse().unwrap());
    let mut holder = app.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1, $2)").bind(space).bind(key).execute(&mut *holder).await.unwrap();

    // Made unlocked, in one statement: the held lock does not stop it.
    let path = format!("/v1/listings/{listing}/bids");
    let placed = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        app.post(&path, &buyer.key, json!({ "amount": 80000 })),
    )
    .await
    .expect("an unlocked placement does not wait for the placement lock")
    .expect(201);
    app.post(&format!("/v1/bids/{}/withdraw", placed.body["bid"]["id"].as_str().unwrap()), &buyer.key, json!({}))
        .await
        .expect(200);

    // With an Idempotency-Key too: its statement stores its answer with it.
    let keyed = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        app.post_keyed(&path, Some(&buyer.key), json!({ "amount": 81000 }), "a-key-0001"),
    )
    .await
    .expect("a keyed placement does not wait for the placement lock")
    .expect(201);
    assert_eq!(app.count("SELECT count(*) FROM idempotency_keys").await, 1);
    holder.rollback().await.unwrap();
    let again = app.post_keyed(&path, Some(&buyer.key), json!({ "amount": 81000 }), "a-key-0001").await.expect(201);
    assert_eq!(again.body, keyed.body);
}
