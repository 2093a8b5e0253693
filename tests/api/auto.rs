//! Auto-negotiation: policies set by API, and the executor that answers bids for them.

use std::time::Duration;

use haggle_client::{Client, ClientError, NewListing, Placement, PolicyScope, ProfilePatch};
use haggle_domain::issues::Prices;
use haggle_domain::strategy::{Policy, Strategy};
use haggle_domain::{BidStatus, Party, Tier};
use serde_json::{Value, json};

use crate::support::{Agent, Deal, ServerProcess, TestApp, TestDb, eventually};

/// Places the opening bid and returns (bid id, thread id).
async fn open(app: &TestApp, buyer: &Agent, listing: &str, amount: i64) -> (String, String) {
    let resp = app.post(format!("/v1/listings/{listing}/bids"), &buyer.key, json!({ "amount": amount })).await;
    let body = resp.expect(201).body;
    (body["bid"]["id"].as_str().unwrap().to_owned(), body["thread"]["id"].as_str().unwrap().to_owned())
}

async fn thread(app: &TestApp, agent: &Agent, thread: &str) -> Value {
    app.get(format!("/v1/threads/{thread}"), &agent.key).await.expect(200).body
}

/// The thread once it has ended, with its bids.
async fn ended(app: &TestApp, agent: &Agent, id: &str) -> Value {
    eventually("the thread to end", || async move {
        let read = thread(app, agent, id).await;
        (read["status"] != "ACTIVE").then_some(read)
    })
    .await
}

/// The agent's events of one type, once there are at least `n`.
async fn events_of(app: &TestApp, agent: &Agent, kind: &str, n: usize) -> Vec<Value> {
    eventually(&format!("{n} {kind} events"), || async move {
        let page = app.get("/v1/events?limit=200", &agent.key).await.expect(200).body;
        let found: Vec<Value> =
            page["data"].as_array().unwrap().iter().filter(|e| e["type"] == kind).cloned().collect();
        (found.len() >= n).then_some(found)
    })
    .await
}

fn amounts_by(thread: &Value, author: &str) -> Vec<i64> {
    let bids = thread["bids"].as_array().unwrap();
    bids.iter().filter(|b| b["author"] == author).map(|b| b["amount"].as_i64().unwrap()).collect()
}

fn field_errors(body: &Value) -> Vec<String> {
    body["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn policies_are_validated_and_only_their_owner_sees_them() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000 })).await;
    let rival = app.buyer("rival").await;
    let policy_path = format!("/v1/listings/{}/policy", deal.listing);
    let before = app.snapshot().await;

    // A seller floor above the ask, a negative step, an unknown strategy: 422 with the fields.
    let cases = [
        (json!({ "limit": 100001, "counter": { "strategy": "split" } }), "limit"),
        (json!({ "limit": 90000, "counter": { "strategy": "step", "amount": -500 } }), "counter.amount"),
        (json!({ "limit": 90000, "counter": { "strategy": "haggle_hard" } }), "counter"),
        (json!({ "limit": 90000, "accept_at": 80000, "counter": { "strategy": "split" } }), "accept_at"),
        (json!({ "limit": 90000, "max_auto_rounds": 0, "counter": { "strategy": "split" } }), "max_auto_rounds"),
        (json!({ "limit": 90000 }), "counter"),
    ];
    for (body, field) in cases {
        let resp = app.put(&policy_path, &deal.seller.key, body.clone()).await.expect_problem(422, "validation_failed");
        assert!(field_errors(&resp.body).iter().any(|f| f.starts_with(field)), "{body}: {}", resp.body);
    }
    // A buyer cannot use the seller tier engine; its ceiling is not checked against the ask.
    let resp = app
        .put(&policy_path, &deal.buyer.key, json!({ "limit": 90000, "counter": { "strategy": "tier" } }))
        .await
        .expect_problem(422, "validation_failed");
    assert_eq!(field_errors(&resp.body), ["counter.strategy"]);
    // Wrong types and unknown fields are malformed.
    for body in [
        json!({ "limit": "lots", "counter": { "strategy": "split" } }),
        json!({ "limit": 90000, "floor": 1, "counter": { "strategy": "split" } }),
        json!({ "limit": 90000, "counter": { "strategy": "step", "amount": 5, "speed": 2 } }),
    ] {
        app.put(&policy_path, &deal.seller.key, body).await.expect_problem(400, "malformed_request");
    }
    app.put(
        "/v1/agents/me/policies/broker",
        &deal.seller.key,
        json!({ "limit": 1, "counter": { "strategy": "split" } }),
    )
    .await
    .expect_problem(404, "not_found");
    assert_eq!(app.snapshot().await, before, "refused policies changed nothing");

    // Stored with its defaults; the owner reads it back; nobody else can.
    let stored = app
        .put(&policy_path, &deal.seller.key, json!({ "limit": 87654, "counter": { "strategy": "tier" } }))
        .await
        .expect(200)
        .body;
    assert_eq!(stored["scope"], "listing");
    assert_eq!(stored["role"], "seller");
    assert_eq!(
        stored["policy"],
        json!({ "limit": 87654, "max_auto_rounds": 5, "require_approval": false, "counter": { "strategy": "tier" } })
    );
    assert_eq!(app.get(&policy_path, &deal.seller.key).await.expect(200).body["policy"], stored["policy"]);
    // On the same listing, a buyer's policy is its own, and it sees none of the seller's.
    app.get(&policy_path, &rival.key).await.expect_problem(404, "not_found");
    let own = app
        .put(&policy_path, &rival.key, json!({ "limit": 95000, "counter": { "strategy": "step", "fraction": 0.25 } }))
        .await
        .expect(200)
        .body;
    assert_eq!(own["role"], "buyer");
    assert_eq!(app.get(&policy_path, &deal.seller.key).await.expect(200).body["policy"]["limit"], 87654);

    // Threads: only their parties; the caller's role follows from its side.
    let (_, thread_id) = open(&app, &deal.buyer, &deal.listing, 50000).await;
    let thread_path = format!("/v1/threads/{thread_id}/policy");
    let buyer_policy = json!({ "limit": 70000, "require_approval": true, "counter": { "strategy": "split" } });
    app.put(&thread_path, &rival.key, buyer_policy.clone()).await.expect_problem(404, "not_found");
    assert_eq!(app.put(&thread_path, &deal.buyer.key, buyer_policy).await.expect(200).body["role"], "buyer");
    app.get(&thread_path, &rival.key).await.expect_problem(404, "not_found");

    // Defaults per role, and deletion.
    let defaults = "/v1/agents/me/policies/seller";
    app.get(defaults, &deal.seller.key).await.expect_problem(404, "not_found");
    let body = json!({ "limit": 90000, "counter": { "strategy": "time", "k": 0.1, "e": 0.5 } });
    assert_eq!(app.put(defaults, &deal.seller.key, body).await.expect(200).body["scope"], "agent");
    // Left out, the time tactic's `k` and `e` are 0 and 1 (linear). Whole numbers may be written
    // as floats, and an optional field sent as `null` is left out.
    let body = json!({ "limit": 90000.0, "accept_at": null, "counter": { "strategy": "time", "start": null } });
    assert_eq!(
        app.put(defaults, &deal.seller.key, body).await.expect(200).body["policy"],
        json!({
            "limit": 90000, "max_auto_rounds": 5, "require_approval": false,
            "counter": { "strategy": "time", "k": 0.0, "e": 1.0 }
        })
    );
    app.delete(defaults, &deal.seller.key).await.expect(204);
    app.delete(defaults, &deal.seller.key).await.expect_problem(404, "not_found");

    // A policy cannot take over an ended thread or a listing that is gone.
    app.post_empty(format!("/v1/listings/{}/withdraw", deal.listing), &deal.seller.key).await.expect(200);
    app.put(&policy_path, &deal.seller.key, json!({ "limit": 87654, "counter": { "strategy": "tier" } }))
        .await
        .expect_problem(409, "listing_unavailable");
    app.put(&thread_path, &deal.buyer.key, json!({ "limit": 70000, "counter": { "strategy": "split" } }))
        .await
        .expect_problem(409, "invalid_transition");
}

#[tokio::test]
async fn two_policies_with_overlapping_limits_make_a_deal_between_them() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000, "max_rounds": 12 })).await;
    let seller_policy = json!({ "limit": 80000, "max_auto_rounds": 10, "counter": { "strategy": "split" } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, seller_policy).await.expect(200);
    let buyer_policy =
        json!({ "limit": 90000, "max_auto_rounds": 10, "counter": { "strategy": "step", "amount": 3000 } });
    app.put("/v1/agents/me/policies/buyer", &deal.buyer.key, buyer_policy).await.expect(200);

    // One bid by HTTP; everything after it is the server's.
    let (_, thread_id) = open(&app, &deal.buyer, &deal.listing, 60000).await;
    let done = ended(&app, &deal.buyer, &thread_id).await;
    assert_eq!(done["status"], "ACCEPTED", "{done}");
    let sellers = amounts_by(&done, "seller");
    let buyers = amounts_by(&done, "buyer");
    assert!(sellers.len() >= 2 && buyers.len() >= 2, "several rounds were played: {done}");
    assert!(sellers.iter().all(|&a| a >= 80000), "the seller's floor held: {sellers:?}");
    assert!(buyers.iter().all(|&a| a <= 90000), "the buyer's ceiling held: {buyers:?}");
    let orders = app.get("/v1/orders", &deal.buyer.key).await.expect(200).body;
    let price = orders["data"][0]["amount"].as_i64().unwrap();
    assert!((80000..=90000).contains(&price), "the deal is between the limits: {price}");
    let decisions = app.count("SELECT count(*) FROM auto_decisions WHERE action <> 'stop'").await;
    assert_eq!(
        decisions as usize,
        done["bids"].as_array().unwrap().len(),
        "every bid after the opening was the policies'"
    );
}

/// A listing of `max_rounds` asking 100000 whose seller's policy (floor 50000) and buyer's
/// (ceiling 95000) both step by `amount` for up to 30 moves each, and the buyer's opening bid
/// at 60000: a long exchange between two policies. Returns the deal and the thread.
async fn stepping_policies(app: &TestApp, max_rounds: i64, amount: i64) -> (Deal, String) {
    let deal = Deal::new(app, json!({ "ask_amount": 100000, "max_rounds": max_rounds })).await;
    let step =
        |limit| json!({ "limit": limit, "max_auto_rounds": 30, "counter": { "strategy": "step", "amount": amount } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, step(50000)).await.expect(200);
    app.put("/v1/agents/me/policies/buyer", &deal.buyer.key, step(95000)).await.expect(200);
    let (_, thread_id) = open(app, &deal.buyer, &deal.listing, 60000).await;
    (deal, thread_id)
}

#[tokio::test]
async fn two_policies_exchange_moves_in_one_transaction_up_to_the_chains_length() {
    let app = TestApp::spawn().await;
    let (deal, thread_id) = stepping_policies(&app, 40, 1000).await;
    let done = ended(&app, &deal.buyer, &thread_id).await;
    assert_eq!(done["status"], "ACCEPTED", "{done}");

    // Each decision is a row inserted by the transaction that made it (and never updated):
    // the first CHAIN moves were one transaction, the next began another.
    let transactions: Vec<String> = sqlx::query_scalar(
        "SELECT d.xmin::text FROM auto_decisions d JOIN bids b ON b.id = d.bid_id
             WHERE d.action <> 'stop' ORDER BY b.round",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let chain = haggle_server::executor::DEFAULT_CHAIN;
    assert!(transactions.len() > chain, "the negotiation was longer than a chain: {done}");
    assert!(transactions[..chain].iter().all(|x| *x == transactions[0]), "{transactions:?}");
    assert_ne!(transactions[chain], transactions[0], "{transactions:?}");
    // A chained counter is one statement, which records its decision and takes the other side's
    // task as well: each decision of the chain was written by the command that marked the bid it
    // answered COUNTERED (a row's `cmin`), up to the chain's last move, which leaves its task for
    // another transaction and records its decision after it.
    let same_command: Vec<bool> = sqlx::query_scalar(
        "SELECT d.cmin::text = b.cmin::text FROM auto_decisions d JOIN bids b ON b.id = d.bid_id
             WHERE d.action = 'counter' AND d.xmin = (SELECT xmin FROM auto_decisions ORDER BY decided_at LIMIT 1)
             ORDER BY b.round",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(same_command.len(), chain, "{same_command:?}");
    assert!(same_command[..chain - 1].iter().all(|same| *same), "a statement a chained counter: {same_command:?}");
    assert!(!same_command[chain - 1], "the chain's last counter records its decision apart: {same_command:?}");
    // A counter for every bid after the opening, and the acceptance of the last.
    assert_eq!(
        transactions.len(),
        done["bids"].as_array().unwrap().len(),
        "every move after the opening was a policy's"
    );
    // Every move was still the state machine's: one pending bid at a time, each answered.
    let bids = done["bids"].as_array().unwrap();
    assert!(bids[..bids.len() - 1].iter().all(|b| b["status"] == "COUNTERED"), "{done}");
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM auto_tasks WHERE done_at IS NULL").await, 0);
}

#[tokio::test]
async fn an_exchange_decided_in_memory_is_written_by_one_statement_and_told_in_order() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000, "max_rounds": 10 })).await;
    let step = |limit| json!({ "limit": limit, "counter": { "strategy": "step", "amount": 8000 } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, step(75000)).await.expect(200);
    app.put("/v1/agents/me/policies/buyer", &deal.buyer.key, step(85000)).await.expect(200);
    let (opening, thread_id) = open(&app, &deal.buyer, &deal.listing, 60000).await;
    let done = ended(&app, &deal.buyer, &thread_id).await;
    assert_eq!(done["status"], "ACCEPTED", "{done}");
    let bids = done["bids"].as_array().unwrap();
    // The opening, counters from both sides (the deadlock window's six bids not reached: no
    // mediator to ask), and the acceptance of the last.
    assert!((4..6).contains(&bids.len()), "{done}");

    // Every counter and its decision were written by one command of one transaction (a row's
    // `xmin` and `cmin`): the bids the counters answered (the opening, and all but the last
    // counter, which the acceptance changed after), the decisions and the tasks taken.
    let commands: Vec<(String, String)> = sqlx::query_as(
        "SELECT DISTINCT b.xmin::text, b.cmin::text FROM auto_decisions d JOIN bids b ON b.id = d.bid_id
               WHERE d.action = 'counter'
         UNION SELECT DISTINCT d.xmin::text, d.cmin::text FROM auto_decisions d WHERE d.action = 'counter'
         UNION SELECT DISTINCT a.xmin::text, a.cmin::text FROM auto_tasks a JOIN bids b ON b.id = a.bid_id
               WHERE b.status = 'COUNTERED' AND b.round > 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(commands.len(), 1, "{commands:?}");
    assert_eq!(app.count("SELECT count(*) FROM auto_decisions WHERE action = 'counter'").await, bids.len() as i64 - 1);
    assert_eq!(app.count("SELECT count(*) FROM auto_tasks WHERE done_at IS NULL").await, 0);

    // Stored as the state machine makes them one statement a move: each bid answered when the
    // next was made, the thread on its last bid, and the policies' moves played exactly.
    for pair in bids.windows(2) {
        assert_eq!(pair[0]["status"], "COUNTERED", "{done}");
        assert_eq!(pair[1]["parent_bid_id"], pair[0]["id"], "{done}");
        assert!(pair[1]["created_at"].as_str() > pair[0]["created_at"].as_str(), "{done}");
    }
    let stored: Vec<(i32, String, Option<String>, bool, bool)> = sqlx::query_as(
        "SELECT round, status, reason, responded_at IS NOT DISTINCT FROM updated_at,
                responded_at IS NULL OR responded_at > created_at
         FROM bids WHERE thread_id = $1::uuid ORDER BY round",
    )
    .bind(&thread_id)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let last = stored.len() - 1;
    for (round, status, reason, answered_when_updated, answered_after_made) in &stored[..last] {
        assert_eq!((status.as_str(), reason.as_deref()), ("COUNTERED", Some("countered")), "round {round}");
        assert!(*answered_when_updated && *answered_after_made, "round {round}: {stored:?}");
    }
    assert_eq!(stored[last].1, "ACCEPTED");
    let (rounds, last_bid): (i32, String) =
        sqlx::query_as("SELECT rounds, last_bid_id::text FROM threads WHERE id = $1::uuid")
            .bind(&thread_id)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!((rounds as usize, last_bid.as_str()), (bids.len(), bids[last]["id"].as_str().unwrap()));
    let policy = |limit| serde_json::from_value::<Policy>(step(limit)).unwrap();
    assert_played_by(&done, 100000, 10, &policy(75000), &policy(85000));

    // Each side is told of every move, in the order of the moves.
    for agent in [&deal.buyer, &deal.seller] {
        let events = events_of(&app, agent, "bid.accepted", 1).await;
        assert_eq!(events.len(), 1);
        let page = app.get("/v1/events?limit=200", &agent.key).await.expect(200).body;
        let told: Vec<&str> = page["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["thread_id"] == thread_id.as_str() && e["type"].as_str().unwrap().starts_with("bid."))
            .map(|e| e["bid_id"].as_str().unwrap())
            .collect();
        let made: Vec<&str> = bids.iter().map(|b| b["id"].as_str().unwrap()).collect();
        assert_eq!(told[0], opening);
        assert_eq!(told.len(), made.len() + 1, "each bid once, the accepted one twice: {told:?}");
        assert_eq!(&told[..made.len()], &made[..], "{told:?}");
    }
}

#[tokio::test]
async fn an_exchange_decided_in_memory_is_marked_deadlocked_where_the_mediator_marks_it() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000, "max_rounds": 40 })).await;
    // Steps of 1.00 on a gap of 400.00: the gap has hardly narrowed by the sixth bid, the first
    // at which the deadlock window (four bids back, and the two before) can tell.
    let step =
        |limit| json!({ "limit": limit, "max_auto_rounds": 4, "counter": { "strategy": "step", "amount": 100 } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, step(50000)).await.expect(200);
    app.put("/v1/agents/me/policies/buyer", &deal.buyer.key, step(95000)).await.expect(200);
    let (_, thread_id) = open(&app, &deal.buyer, &deal.listing, 60000).await;
    let stop = events_of(&app, &deal.seller, "negotiation.action_required", 1).await.remove(0);
    assert_eq!(stop["data"]["reason"], "max_auto_rounds", "{stop}");
    settled(&app).await;

    // The counters of rounds 2 to 5 were decided in memory and written by one command (with the
    // opening they answered, and each one after them answered); the sixth, which deadlocks the
    // thread, was made with the mediator's read by a command of its own, which answered the
    // fifth, and marked the thread.
    let commands: Vec<(i32, String)> =
        sqlx::query_as("SELECT round, cmin::text FROM bids WHERE thread_id = $1::uuid AND round <= 5 ORDER BY round")
            .bind(&thread_id)
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(commands.len(), 5, "{commands:?}");
    assert!(commands[..4].iter().all(|(_, cmin)| *cmin == commands[0].1), "{commands:?}");
    assert_ne!(commands[4].1, commands[0].1, "{commands:?}");
    let marked_with_sixth: bool = sqlx::query_scalar(
        "SELECT t.deadlock_at = b.created_at AND t.mediation IS NOT NULL
         FROM threads t JOIN bids b ON b.thread_id = t.id AND b.round = 6 WHERE t.id = $1::uuid",
    )
    .bind(&thread_id)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert!(marked_with_sixth, "the thread was marked by the sixth bid");
    let marks = events_of(&app, &deal.buyer, "negotiation.deadlock", 1).await;
    let sixth: String = sqlx::query_scalar("SELECT id::text FROM bids WHERE thread_id = $1::uuid AND round = 6")
        .bind(&thread_id)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(marks[0]["bid_id"], sixth.as_str(), "{marks:?}");
    let read = thread(&app, &deal.buyer, &thread_id).await;
    assert_eq!(read["status"], "ACTIVE", "{read}");
    assert_eq!(amounts_by(&read, "seller"), [99900, 99800, 99700, 99600], "{read}");
    assert_eq!(amounts_by(&read, "buyer"), [60000, 60100, 60200, 60300, 60400], "{read}");
}

#[tokio::test]
async fn chained_policies_keep_their_round_budgets() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000, "max_rounds": 40 })).await;
    // Limits far apart, and a budget of three counters each: the exchange is one chain, and
    // each move there counts its own policy's counters made before it in the same transaction.
    let step =
        |limit| json!({ "limit": limit, "max_auto_rounds": 3, "counter": { "strategy": "step", "amount": 1000 } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, step(90000)).await.expect(200);
    app.put("/v1/agents/me/policies/buyer", &deal.buyer.key, step(70000)).await.expect(200);
    let (_, thread_id) = open(&app, &deal.buyer, &deal.listing, 60000).await;

    let stop = events_of(&app, &deal.seller, "negotiation.action_required", 1).await.remove(0);
    assert_eq!(stop["data"]["reason"], "max_auto_rounds", "{stop}");
    settled(&app).await;
    let read = thread(&app, &deal.buyer, &thread_id).await;
    assert_eq!(read["status"], "ACTIVE", "{read}");
    // The opening, then three counters from each side, the seller's first.
    assert_eq!(amounts_by(&read, "seller"), [99000, 98000, 97000], "{read}");
    assert_eq!(amounts_by(&read, "buyer"), [60000, 61000, 62000, 63000], "{read}");
    let last = read["bids"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["author"].as_str(), last["status"].as_str()), (Some("buyer"), Some("PENDING")));
    assert_eq!(stop["bid_id"], last["id"]);
    // Six counters and the stop, all in the transaction the first task began.
    let transactions: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT xmin::text FROM auto_decisions").fetch_all(&app.pool).await.unwrap();
    assert_eq!(transactions.len(), 1, "{transactions:?}");
    assert_eq!(app.count("SELECT count(*) FROM auto_decisions WHERE action = 'counter'").await, 6);
    assert_eq!(app.count("SELECT count(*) FROM auto_decisions WHERE action = 'stop'").await, 1);
    // Only the seller's owner is asked.
    let buyer_events = app.get("/v1/events?limit=200", &deal.buyer.key).await.expect(200).body;
    assert!(buyer_events["data"].as_array().unwrap().iter().all(|e| e["type"] != "negotiation.action_required"));
}

#[tokio::test]
async fn an_agent_racing_its_own_policys_chained_moves_gets_one_outcome() {
    let app = TestApp::spawn().await;
    let (deal, thread_id) = stepping_policies(&app, 60, 500).await;

    // While the two policies counter each other in chained transactions, the agents themselves
    // keep trying to accept whatever bid awaits them, from eight connections at once.
    let racers = (0..8).map(|_| {
        let (app, deal, thread_id) = (&app, &deal, thread_id.clone());
        async move {
            let mut statuses = Vec::new();
            loop {
                let read = thread(app, &deal.buyer, &thread_id).await;
                if read["status"] != "ACTIVE" {
                    return statuses;
                }
                let last = read["bids"].as_array().unwrap().last().unwrap().clone();
                let answerer = if last["author"] == "seller" { &deal.buyer } else { &deal.seller };
                if last["status"] == "PENDING" {
                    let path = format!("/v1/bids/{}/accept", last["id"].as_str().unwrap());
                    statuses.push(app.post_empty(path, &answerer.key).await.status);
                }
            }
        }
    });
    let statuses: Vec<u16> = futures::future::join_all(racers).await.into_iter().flatten().collect();
    assert!(!statuses.is_empty(), "the agents raced their policies");
    assert!(statuses.iter().all(|s| [200, 409].contains(s)), "only a win or a conflict: {statuses:?}");
    assert!(statuses.iter().filter(|s| **s == 200).count() <= 1, "one acceptance at most: {statuses:?}");

    let done = ended(&app, &deal.buyer, &thread_id).await;
    assert_eq!(done["status"], "ACCEPTED", "{done}");
    let bids = done["bids"].as_array().unwrap();
    assert!(bids[..bids.len() - 1].iter().all(|b| b["status"] == "COUNTERED"), "one move per bid: {done}");
    assert_eq!(bids.last().unwrap()["status"], "ACCEPTED");
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1, "one deal, whoever won");
    let order = app.get("/v1/orders", &deal.buyer.key).await.expect(200).body["data"][0].clone();
    assert_eq!(order["amount"], bids.last().unwrap()["amount"], "{order}");
    // The policies' rounds are consecutive: nothing was made twice or skipped.
    let rounds: Vec<i64> = bids.iter().map(|b| b["round"].as_i64().unwrap()).collect();
    assert_eq!(rounds, (1..=bids.len() as i64).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_bid_made_as_its_policy_was_set_and_missed_by_both_is_still_answered() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000, "max_rounds": 12 })).await;
    let (bid_id, thread_id) = open(&app, &deal.buyer, &deal.listing, 70000).await;
    // The race, laid out: the seller's policy committed while the bid's statement, which began
    // before it, could not see it, and the policy's own queuing ran before the bid committed.
    // Here: the policy is written as a PUT on another listing would write it, for this one,
    // without its queuing.
    let other = app.listing(&deal.seller, json!({ "ask_amount": 100000 })).await;
    let policy = json!({ "limit": 80000, "counter": { "strategy": "split" } });
    app.put(format!("/v1/listings/{other}/policy"), &deal.seller.key, policy).await.expect(200);
    let copied = sqlx::query(
        "INSERT INTO policies (id, agent_id, role, listing_id, policy)
         SELECT gen_random_uuid(), agent_id, role, $1::uuid, policy FROM policies WHERE listing_id = $2::uuid",
    )
    .bind(&deal.listing)
    .bind(&other)
    .execute(&app.pool)
    .await
    .unwrap();
    assert_eq!(copied.rows_affected(), 1);
    assert_eq!(app.count(format!("SELECT count(*) FROM auto_tasks WHERE bid_id = '{bid_id}'")).await, 0);

    // The executor finds the bid within its tick and the policy answers it.
    let answered = eventually("the policy to answer the raced bid", || async {
        let read = thread(&app, &deal.seller, &thread_id).await;
        (read["bids"].as_array().unwrap().len() > 1 || read["status"] != "ACTIVE").then_some(read)
    })
    .await;
    assert_eq!(answered["bids"][0]["status"], "COUNTERED", "{answered}");
    assert_eq!(answered["bids"][1]["author"], "seller");
    assert_eq!(app.count("SELECT count(*) FROM auto_decisions WHERE action = 'counter'").await, 1);
}

#[tokio::test]
async fn the_tier_engine_answers_a_buyer_policy_to_the_end() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000, "max_rounds": 12 })).await;
    app.put(
        "/v1/agents/me/policies/seller",
        &deal.seller.key,
        json!({ "limit": 75000, "counter": { "strategy": "tier" } }),
    )
    .await
    .expect(200);
    let buyer_policy = json!({ "limit": 88000, "counter": { "strategy": "time", "k": 0.0, "e": 1.0 } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.buyer.key, buyer_policy).await.expect(200);
    let (_, thread_id) = open(&app, &deal.buyer, &deal.listing, 70000).await;
    let done = ended(&app, &deal.seller, &thread_id).await;
    let sellers = amounts_by(&done, "seller");
    assert!(sellers.iter().all(|&a| a >= 75000), "{sellers:?}");
    assert!(amounts_by(&done, "buyer").iter().all(|&a| a <= 88000), "{done}");
    // AGENCY: base 90000, total concession cap 15 % of it, so the engine never goes below 76500.
    assert!(sellers.iter().all(|&a| a >= 76500), "{sellers:?}");
    assert!(["ACCEPTED", "REJECTED"].contains(&done["status"].as_str().unwrap()), "{done}");
}

#[tokio::test]
async fn disjoint_limits_end_in_a_rejection_and_never_cross() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000, "max_rounds": 8 })).await;
    let seller_policy = json!({ "limit": 92000, "max_auto_rounds": 10, "counter": { "strategy": "split" } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, seller_policy).await.expect(200);
    let buyer_policy = json!({ "limit": 85000, "max_auto_rounds": 10, "counter": { "strategy": "split" } });
    app.put("/v1/agents/me/policies/buyer", &deal.buyer.key, buyer_policy).await.expect(200);
    let (_, thread_id) = open(&app, &deal.buyer, &deal.listing, 60000).await;

    // The seller holds at its floor, the buyer at its ceiling, until the seller's final offer
    // (round 8, the listing's last) is past the buyer's ceiling and rejected.
    let done = ended(&app, &deal.buyer, &thread_id).await;
    assert_eq!(done["status"], "REJECTED", "{done}");
    assert_eq!(amounts_by(&done, "seller"), [92000, 92000, 92000, 92000]);
    assert_eq!(amounts_by(&done, "buyer"), [60000, 76000, 84000, 85000]);
    assert_eq!(done["bids"][7]["final"], true);
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM auto_decisions WHERE action = 'stop'").await, 0);
}

#[tokio::test]
async fn approval_and_round_budgets_stop_and_tell_only_the_owner() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000, "max_rounds": 10 })).await;
    let policy_path = format!("/v1/listings/{}/policy", deal.listing);
    let approval = json!({ "limit": 80000, "require_approval": true, "counter": { "strategy": "split" } });
    app.put(&policy_path, &deal.seller.key, approval).await.expect(200);
    let (bid, thread_id) = open(&app, &deal.buyer, &deal.listing, 60000).await;

    let stop = events_of(&app, &deal.seller, "negotiation.action_required", 1).await.remove(0);
    assert_eq!(stop["bid_id"], bid.as_str());
    assert_eq!(stop["thread_id"], thread_id.as_str());
    assert_eq!(stop["data"]["reason"], "approval_required");
    assert_eq!(stop["data"]["role"], "seller");
    // The suggestion is what the policy would do: split 60000 and 100000.
    assert_eq!(stop["data"]["suggestion"], json!({ "action": "counter", "amount": 80000, "final": false }));
    assert_eq!(stop["data"]["bid"]["status"], "PENDING");
    // The bid waits for the seller, and the buyer hears nothing of the stop.
    assert_eq!(app.get(format!("/v1/bids/{bid}"), &deal.buyer.key).await.expect(200).body["status"], "PENDING");
    let buyer_events = app.get("/v1/events", &deal.buyer.key).await.expect(200).body;
    assert!(buyer_events["data"].as_array().unwrap().iter().all(|e| e["type"] != "negotiation.action_required"));

    // Replacing the policy takes over the bid that waits; this one makes one counter only.
    let budget = json!({ "limit": 80000, "max_auto_rounds": 1, "counter": { "strategy": "split" } });
    app.put(&policy_path, &deal.seller.key, budget).await.expect(200);
    let countered = app.get(format!("/v1/bids/{bid}?wait=10"), &deal.buyer.key).await.expect(200).body;
    assert_eq!(countered["status"], "COUNTERED");
    let read = thread(&app, &deal.buyer, &thread_id).await;
    let counter = read["bids"][1].clone();
    assert_eq!(counter["amount"], 80000);
    // The buyer answers by hand; the seller's budget is spent, so its owner is asked.
    let next = app.counter(&deal.buyer, counter["id"].as_str().unwrap(), 65000).await;
    let stops = events_of(&app, &deal.seller, "negotiation.action_required", 2).await;
    assert_eq!(stops[1]["bid_id"], next.as_str());
    assert_eq!(stops[1]["data"]["reason"], "max_auto_rounds");
    assert_eq!(app.get(format!("/v1/bids/{next}"), &deal.seller.key).await.expect(200).body["status"], "PENDING");
    settled(&app).await;
    assert_eq!(app.count("SELECT count(*) FROM auto_decisions WHERE action = 'stop'").await, 2);
}

/// Waits until no task waits for an executor.
async fn settled(app: &TestApp) {
    eventually("the executors to be idle", || async {
        let waiting = app.count("SELECT count(*) FROM auto_tasks WHERE done_at IS NULL").await;
        (waiting == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_bid_the_policy_stopped_on_is_not_decided_again() {
    // The seller's policy counters once; the buyer's policy answers; the seller's stops on the
    // buyer's counter. That counter was queued by the executor's move, and its events were
    // written at the commit: writing them must not queue it again.
    for _ in 0..3 {
        let app = TestApp::spawn().await;
        let deal = Deal::new(&app, json!({ "ask_amount": 100000, "max_rounds": 10 })).await;
        let seller_policy = json!({ "limit": 80000, "max_auto_rounds": 1, "counter": { "strategy": "split" } });
        app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, seller_policy).await.expect(200);
        let buyer_policy = json!({ "limit": 79000, "counter": { "strategy": "step", "amount": 1000 } });
        app.put("/v1/agents/me/policies/buyer", &deal.buyer.key, buyer_policy).await.expect(200);
        let (_, thread_id) = open(&app, &deal.buyer, &deal.listing, 60000).await;

        let stop = events_of(&app, &deal.seller, "negotiation.action_required", 1).await.remove(0);
        assert_eq!(stop["data"]["reason"], "max_auto_rounds");
        settled(&app).await;
        let stops = events_of(&app, &deal.seller, "negotiation.action_required", 1).await;
        assert_eq!(stops.len(), 1, "one stop, told once: {stops:?}");
        assert_eq!(app.count("SELECT count(*) FROM auto_decisions WHERE action = 'stop'").await, 1);
        let read = thread(&app, &deal.seller, &thread_id).await;
        assert_eq!(amounts_by(&read, "buyer"), [60000, 61000]);
        assert_eq!(read["status"], "ACTIVE");
    }
}

#[tokio::test]
async fn finished_tasks_and_old_decisions_are_purged() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000 })).await;
    let policy = json!({ "limit": 80000, "accept_at": 90000, "counter": { "strategy": "split" } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, policy).await.expect(200);
    let (_, thread_id) = open(&app, &deal.buyer, &deal.listing, 95000).await;
    assert_eq!(ended(&app, &deal.buyer, &thread_id).await["status"], "ACCEPTED");
    settled(&app).await;
    assert_eq!(app.count("SELECT count(*) FROM auto_tasks").await, 1);
    // A finished task stays an hour; decisions stay as long as events.
    let outcome = haggle_server::sweeper::run_once(&app.market(), 100).await.unwrap();
    assert_eq!(outcome.purged_tasks, 0);
    sqlx::query("UPDATE auto_tasks SET done_at = now() - interval '2 hours'").execute(&app.pool).await.unwrap();
    sqlx::query("UPDATE auto_decisions SET decided_at = now() - interval '2 days'").execute(&app.pool).await.unwrap();
    let outcome = haggle_server::sweeper::run_once(&app.market(), 100).await.unwrap();
    assert_eq!(outcome.purged_tasks, 1);
    let (_, decisions) =
        haggle_server::sweeper::purge_events(&app.pool, Duration::from_secs(86400), 100).await.unwrap();
    assert_eq!(decisions, 1);
    assert_eq!(
        app.count("SELECT count(*) FROM auto_tasks").await + app.count("SELECT count(*) FROM auto_decisions").await,
        0
    );
}

#[tokio::test]
async fn nothing_the_counterparty_reads_carries_a_private_value() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000, "max_rounds": 10 })).await;
    // Distinctive private values that no bid of this negotiation can take.
    let seller_policy = json!({ "limit": 71717, "accept_at": 93939, "reject_beyond": 41414,
                                "max_auto_rounds": 7, "counter": { "strategy": "step", "amount": 2000 } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, seller_policy).await.expect(200);
    let buyer_policy = json!({ "limit": 96969, "accept_at": 61616, "max_auto_rounds": 7,
                               "counter": { "strategy": "step", "amount": 3000 } });
    app.put("/v1/agents/me/policies/buyer", &deal.buyer.key, buyer_policy).await.expect(200);
    let (_, thread_id) = open(&app, &deal.buyer, &deal.listing, 50000).await;
    let done = ended(&app, &deal.buyer, &thread_id).await;
    assert_eq!(done["status"], "ACCEPTED", "{done}");
    for agent in [&deal.buyer, &deal.seller] {
        events_of(&app, agent, "order.created", 1).await;
    }

    let bids: Vec<String> =
        done["bids"].as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap().to_owned()).collect();
    for (reader, secrets) in [(&deal.buyer, vec!["71717", "93939", "41414"]), (&deal.seller, vec!["96969", "61616"])] {
        let mut seen = String::new();
        for path in [
            format!("/v1/threads/{thread_id}"),
            "/v1/threads".to_owned(),
            "/v1/orders".to_owned(),
            "/v1/events?limit=200".to_owned(),
        ]
        .into_iter()
        .chain(bids.iter().map(|bid| format!("/v1/bids/{bid}")))
        {
            seen.push_str(&app.get(&path, &reader.key).await.expect(200).body.to_string());
        }
        for secret in secrets {
            assert!(!contains_number(&seen, secret), "{secret} leaked to the counterparty");
        }
        for word in ["accept_at", "reject_beyond", "max_auto_rounds", "strategy", "\"limit\""] {
            assert!(!seen.contains(word), "{word} leaked");
        }
    }
}

/// Whether `text` holds `number` as a number of its own: not inside a longer run of letters and
/// digits, where a private value's digits can turn up by chance (a UUID's hex, a timestamp's
/// fraction of a second).
fn contains_number(text: &str, number: &str) -> bool {
    text.match_indices(number).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + number.len()..].chars().next();
        ![before, after].into_iter().flatten().any(|c| c.is_ascii_alphanumeric())
    })
}

#[test]
fn a_number_is_found_on_its_own_not_inside_an_id_or_a_time() {
    assert!(contains_number(r#"{"amount":71717}"#, "71717"));
    assert!(contains_number("my limit is 71717.", "71717"));
    assert!(!contains_number("0190a1b2-7171-7d71-a717-171717ab9c3e", "71717"));
    assert!(!contains_number("2026-11-28T13:48:24.717171Z", "71717"));
    assert!(!contains_number(r#"{"amount":717170}"#, "71717"));
}

/// An anonymous client of a server process. It sends each request once, as a plain HTTP
/// request would be: a failure to get an answer fails the test rather than being retried.
fn client_of(base: &str) -> Client {
    Client::new(base, None).unwrap().attempts(1)
}

/// Registers an agent on a server process, raised to `tier` by the operator when given, and
/// returns its key.
async fn register(server: &Client, name: &str, admin: &str, tier: Option<Tier>) -> String {
    let registered = server.register(name).await.unwrap();
    if let Some(tier) = tier {
        let operator = server.with_api_key(admin);
        operator.update_agent(registered.agent.id, &ProfilePatch::tier(tier)).await.unwrap();
    }
    registered.api_key
}

#[tokio::test]
async fn two_instances_answer_each_bid_exactly_once() {
    let db = TestDb::create().await;
    let admin = "exactly-once-admin-token";
    let env = [("DATABASE_URL", db.url.as_str()), ("HAGGLE_ADMIN_TOKEN", admin), ("HAGGLE_RATE_LIMIT", "0")];
    let first = ServerProcess::spawn(&env);
    let second = ServerProcess::spawn(&env);
    let servers = [client_of(&first.base), client_of(&second.base)];
    let seller_key = register(&servers[0], "seller", admin, None).await;
    let sellers = [servers[0].with_api_key(&seller_key), servers[1].with_api_key(&seller_key)];
    let seller_policy = Policy { max_auto_rounds: 10, ..Policy::new(80000, Strategy::Split {}) };
    sellers[1].set_policy(PolicyScope::Agent(Party::Seller), &seller_policy).await.unwrap();

    const N: usize = 100;
    let buyer_policy =
        Policy { max_auto_rounds: 10, ..Policy::new(90000, Strategy::Step { amount: Some(4000), fraction: None }) };
    let mut buyers = Vec::new();
    for i in 0..N {
        let server = &servers[i % 2];
        let buyer = server.with_api_key(register(server, &format!("buyer-{i}"), admin, Some(Tier::Agency)).await);
        buyer.set_policy(PolicyScope::Agent(Party::Buyer), &buyer_policy).await.unwrap();
        let listing = NewListing { max_rounds: Some(12), ..NewListing::new(format!("Lot {i}"), 100000) };
        let created = sellers[i % 2].create_listing(&listing).await.unwrap();
        buyers.push((buyer, created.id));
    }
    // All opening bids at once, half through each instance (each buyer's client is of the
    // instance it was registered on, alternately).
    let opening = Placement::new(60000);
    let opened =
        futures::future::join_all(buyers.iter().map(|(buyer, listing)| buyer.place_bid(*listing, &opening))).await;
    let refused: Vec<&ClientError> = opened.iter().filter_map(|placed| placed.as_ref().err()).collect();
    assert!(refused.is_empty(), "{refused:?}");

    let pool = db.pool(2).await;
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move { sqlx::query_scalar::<_, i64>(sql).fetch_one(&pool).await.unwrap() }
    };
    eventually("all negotiations to end", || async {
        (count("SELECT count(*) FROM threads WHERE status <> 'ACTIVE'").await == N as i64).then_some(())
    })
    .await;
    assert_eq!(count("SELECT count(*) FROM threads WHERE status = 'ACCEPTED'").await, N as i64);
    assert_eq!(count("SELECT count(*) FROM orders").await, N as i64);
    // No bid was answered twice: one decision per answered bid, and each bid has at most one
    // answer in the thread.
    assert_eq!(
        count("SELECT count(*) FROM (SELECT bid_id FROM auto_decisions GROUP BY bid_id HAVING count(*) > 1) d").await,
        0
    );
    assert_eq!(count("SELECT count(*) FROM auto_decisions WHERE action = 'stop'").await, 0);
    assert_eq!(
        count("SELECT count(*) FROM bids WHERE status <> 'PENDING'").await,
        count("SELECT count(*) FROM auto_decisions").await,
        "every bid was answered by exactly one decision"
    );
    assert_eq!(count("SELECT count(*) FROM auto_tasks WHERE done_at IS NULL").await, 0);
    for server in [&first, &second] {
        let log = server.log();
        assert!(!log.contains("status=5"), "a 5xx in the log:\n{log}");
        assert!(!log.contains(" ERROR "), "an error in the log:\n{log}");
        assert!(!log.contains(" WARN "), "a warning in the log:\n{log}");
    }
}

#[tokio::test]
async fn a_decision_cut_short_by_a_crash_is_made_after_restart() {
    let db = TestDb::create().await;
    let admin = "crash-admin-token";
    // The first server queues the task but has no executor; the test then makes the second
    // server's executor wait on a lock mid-decision, and kills it.
    let quiet = [("DATABASE_URL", db.url.as_str()), ("HAGGLE_ADMIN_TOKEN", admin), ("HAGGLE_AUTO_WORKERS", "0")];
    let first = ServerProcess::spawn(&quiet);
    let server = client_of(&first.base);
    let seller = server.with_api_key(register(&server, "seller", admin, None).await);
    let buyer_key = register(&server, "buyer", admin, Some(Tier::Agency)).await;
    let buyer = server.with_api_key(&buyer_key);
    let listing = seller.create_listing(&NewListing::new("Lamp", 100000)).await.unwrap().id;
    let policy = Policy::new(80000, Strategy::Split {});
    seller.set_policy(PolicyScope::Listing(listing), &policy).await.unwrap();
    let placed = buyer.place_bid(listing, &Placement::new(60000)).await.unwrap();
    let (bid, thread_id) = (placed.bid.id, placed.thread.id);

    let pool = db.pool(4).await;
    eventually("the task to be queued", || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM auto_tasks").fetch_one(&pool).await.unwrap();
        (n == 1).then_some(())
    })
    .await;
    let mut blocker = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM threads WHERE id = $1 FOR UPDATE").bind(thread_id).execute(&mut *blocker).await.unwrap();

    let mut second = ServerProcess::spawn(&[("DATABASE_URL", db.url.as_str()), ("HAGGLE_ADMIN_TOKEN", admin)]);
    // The second executor has taken the task and waits for the bid's lock.
    eventually("the executor to wait on the bid", || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        (waiting == 1).then_some(())
    })
    .await;
    let executor: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    second.kill();
    blocker.rollback().await.unwrap();

    // Nothing was decided, and the task is still queued, once the killed executor's session has
    // ended (and with it its transaction).
    eventually("the killed executor's session to end", || async {
        let alive: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)")
            .bind(&executor)
            .fetch_one(&pool)
            .await
            .unwrap();
        (alive == 0).then_some(())
    })
    .await;
    let decided: i64 = sqlx::query_scalar("SELECT count(*) FROM auto_decisions").fetch_one(&pool).await.unwrap();
    assert_eq!(decided, 0);
    let status: String =
        sqlx::query_scalar("SELECT status FROM bids WHERE id = $1").bind(bid).fetch_one(&pool).await.unwrap();
    assert_eq!(status, "PENDING");

    let third = ServerProcess::spawn(&[("DATABASE_URL", db.url.as_str()), ("HAGGLE_ADMIN_TOKEN", admin)]);
    let answered = client_of(&third.base).with_api_key(&buyer_key).get_bid(bid, Some(10.0)).await.unwrap();
    assert_eq!(answered.status, BidStatus::Countered, "{answered:?}");
    let decided: i64 = sqlx::query_scalar("SELECT count(*) FROM auto_decisions").fetch_one(&pool).await.unwrap();
    assert_eq!(decided, 1);
    drop(first);
}

#[tokio::test]
async fn committed_work_is_announced_to_every_instance() {
    // Another instance's webhook worker and executor hear of the work a commit queued.
    let app = TestApp::spawn_with(|config| config.auto_workers = 0).await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&app.pool).await.unwrap();
    listener.listen_all(["haggle_deliveries", "haggle_auto"]).await.unwrap();
    let deal = Deal::new(&app, json!({})).await;
    let webhook = json!({ "url": "http://127.0.0.1:9/hook", "events": ["bid.placed"] });
    app.post("/v1/webhooks", &deal.seller.key, webhook).await.expect(201);
    let policy = json!({ "limit": 80000, "counter": { "strategy": "split" } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, policy).await.expect(200);
    open(&app, &deal.buyer, &deal.listing, 60000).await;

    let mut heard = Vec::new();
    while heard.len() < 2 {
        let notification = tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .expect("the queued work was announced")
            .unwrap();
        heard.push((notification.channel().to_owned(), notification.payload().to_owned()));
    }
    heard.sort();
    // The tasks' announcement names the pool that queued them: the instance's own listener
    // passes over it (its commit woke its executor), the others' do not.
    let origin: String =
        sqlx::query_scalar("SELECT current_setting('haggle.origin')").fetch_one(&app.pool).await.unwrap();
    assert_eq!(origin.len(), 32, "every pool has an origin of its own: {origin:?}");
    assert_eq!(heard, [("haggle_auto".to_owned(), origin), ("haggle_deliveries".to_owned(), "1".to_owned())]);
}

#[tokio::test]
async fn a_task_on_its_listings_only_live_thread_is_taken_with_the_threads_lock() {
    // No executor of the instance's own: the test takes the tasks as an executor would.
    let app = TestApp::spawn_with(|config| config.auto_workers = 0).await;
    let deal = Deal::new(&app, json!({})).await;
    let policy = json!({ "limit": 80000, "counter": { "strategy": "split" } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, policy).await.expect(200);
    let (bid_id, thread_id) = open(&app, &deal.buyer, &deal.listing, 60000).await;
    let (bid_id, thread_id): (uuid::Uuid, uuid::Uuid) = (bid_id.parse().unwrap(), thread_id.parse().unwrap());
    // Whether another transaction holds the thread's lock.
    let locked = |thread_id: uuid::Uuid| {
        let pool = app.pool.clone();
        async move {
            match sqlx::query("SELECT 1 FROM threads WHERE id = $1 FOR UPDATE NOWAIT")
                .bind(thread_id)
                .execute(&pool)
                .await
            {
                Ok(_) => false,
                Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("55P03") => true,
                Err(error) => panic!("{error}"),
            }
        }
    };

    // The listing's only live thread: the statement that takes the task locks it and reads the
    // bid as the move reads it, and the rest of the transaction runs on generic plans.
    let mut tx = app.pool.begin().await.unwrap();
    let taken = haggle_server::db::tasks::take_task(&mut tx).await.unwrap().expect("the opening's task");
    assert_eq!(taken.task.bid_id, bid_id);
    let held = taken.held.as_ref().expect("the bid read under the thread's lock");
    assert_eq!((held.bid.id, held.thread.id, held.thread.last_bid_id), (bid_id, thread_id, bid_id));
    assert!(taken.context.is_some());
    // With the lock, the other side as a counter's decision would read it: the buyer, no policy.
    let side = taken.other.as_ref().expect("the thread's other side");
    assert_eq!(side.agent_id.to_string(), deal.buyer.id);
    assert!(side.policy.is_none() && !side.suspended && side.auto_counters == 0, "{side:?}");
    assert!(!taken.more, "no other task was due");
    assert!(locked(thread_id).await, "the task's statement locked the thread");
    assert_eq!(plan_cache_mode(&mut tx).await, "force_generic_plan");
    tx.rollback().await.unwrap();
    assert!(!locked(thread_id).await);

    // With another live thread on the listing, the task is taken without the thread's lock: an
    // acceptance there locks the listing first, as every move does.
    let other = app.buyer("another buyer").await;
    open(&app, &other, &deal.listing, 65000).await;
    let mut tx = app.pool.begin().await.unwrap();
    let taken = haggle_server::db::tasks::take_task(&mut tx).await.unwrap().expect("the opening's task");
    assert_eq!(taken.task.bid_id, bid_id, "the older task first");
    assert!(taken.held.is_none() && taken.other.is_none() && taken.context.is_some());
    assert!(taken.more, "the other buyer's task was due too: the worker passes the signal on");
    assert!(!locked(thread_id).await, "the thread was left unlocked");
    assert_eq!(plan_cache_mode(&mut tx).await, "auto");
    tx.rollback().await.unwrap();
}

/// The transaction's `plan_cache_mode`.
async fn plan_cache_mode(conn: &mut sqlx::PgConnection) -> String {
    sqlx::query_scalar("SELECT current_setting('plan_cache_mode')").fetch_one(conn).await.unwrap()
}

/// Replays every bid of an ended thread after the opening through the domain's `decide` with
/// the policy of the side that made it: the executor played exactly the policy.
fn assert_played_by(done: &Value, ask: i64, max_rounds: i32, seller: &Policy, buyer: &Policy) {
    let bids = done["bids"].as_array().unwrap();
    let amounts: Vec<i64> = bids.iter().map(|b| b["amount"].as_i64().unwrap()).collect();
    for i in 1..amounts.len() {
        let mover = if i % 2 == 1 { Party::Seller } else { Party::Buyer };
        let made = (0..i).filter(|j| (j % 2 == 1) == (mover == Party::Seller)).count();
        let state = haggle_domain::strategy::NegotiationState {
            mover,
            ask,
            max_rounds,
            buyer_tier: Tier::Agency,
            bids: amounts[..i].to_vec(),
            pending_final: bids[i - 1]["final"] == true,
            auto_moves: if mover == Party::Buyer { made as u32 - 1 } else { made as u32 },
        };
        let policy = if mover == Party::Seller { seller } else { buyer };
        let decision = haggle_domain::strategy::decide(policy, &state);
        assert!(
            matches!(decision, haggle_domain::strategy::Decision::Counter { amount, .. } if amount == amounts[i]),
            "bid {i} ({}) is not the policy's {decision:?}: {done}",
            amounts[i]
        );
    }
}

#[tokio::test]
async fn a_q_table_trained_by_the_simulator_negotiates_live_as_a_policy() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("learned.json");
    let output = std::process::Command::new(crate::support::haggle_bin())
        .args(["sim", "--seed", "3", "--learn", "q", "--episodes", "3000", "--export"])
        .arg(&export)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let tables: Value = serde_json::from_slice(&std::fs::read(&export).unwrap()).unwrap();
    assert_eq!(tables["seller"]["strategy"], "learned");
    assert!(serde_json::to_vec(&tables).unwrap().len() < 64 * 1024, "within the default body limit");

    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000, "max_rounds": 10 })).await;
    let seller_policy = json!({ "limit": 70000, "max_auto_rounds": 10, "counter": tables["seller"] });
    let buyer_policy = json!({ "limit": 95000, "max_auto_rounds": 10, "counter": tables["buyer"] });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, seller_policy.clone()).await.expect(200);
    app.put("/v1/agents/me/policies/buyer", &deal.buyer.key, buyer_policy.clone()).await.expect(200);
    let stored = app.get(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key).await.expect(200).body;
    assert_eq!(stored["policy"]["counter"], tables["seller"], "the table is stored as sent");

    // The buyer opens as the learned buyer does; the executor plays both tables from there.
    let seller: Policy = serde_json::from_value(seller_policy).unwrap();
    let buyer: Policy = serde_json::from_value(buyer_policy).unwrap();
    let Strategy::Learned { levels, q, .. } = &buyer.counter else { panic!("not a learned strategy") };
    let opening = haggle_domain::strategy::learned::opening(Prices { limit: buyer.limit, ask: 100000 }, *levels, q);
    let (_, thread_id) = open(&app, &deal.buyer, &deal.listing, opening).await;
    let done = ended(&app, &deal.seller, &thread_id).await;
    assert!(amounts_by(&done, "seller").iter().all(|&a| a >= 70000), "{done}");
    assert!(amounts_by(&done, "buyer").iter().all(|&a| a <= 95000), "{done}");
    assert_played_by(&done, 100000, 10, &seller, &buyer);
    if done["status"] == "ACCEPTED" {
        let orders = app.get("/v1/orders", &deal.buyer.key).await.expect(200).body;
        let price = orders["data"][0]["amount"].as_i64().unwrap();
        assert!((70000..=95000).contains(&price), "{price}");
    }

    // Malformed tables are refused by field; an oversized one by the body limit.
    let policy_path = format!("/v1/listings/{}/policy", deal.listing);
    let mut short = tables["seller"].clone();
    short["q"].as_array_mut().unwrap().pop();
    let mut infinite = tables["seller"].clone();
    infinite["levels"] = json!(11);
    for (counter, field) in [(short, "counter.q"), (infinite, "counter.levels")] {
        let resp = app
            .put(&policy_path, &deal.seller.key, json!({ "limit": 70000, "counter": counter }))
            .await
            .expect_problem(422, "validation_failed");
        assert_eq!(field_errors(&resp.body), [field], "{}", resp.body);
    }
    let huge = json!({ "limit": 70000, "counter": { "strategy": "learned", "levels": 5, "steps": 5,
        "q": vec![vec![0.123456789_f64; 7]; 2000] } });
    app.put(&policy_path, &deal.seller.key, huge).await.expect_problem(413, "payload_too_large");
}

#[tokio::test]
async fn two_bayes_policies_negotiate_within_their_limits() {
    let app = TestApp::spawn().await;
    let deal = Deal::new(&app, json!({ "ask_amount": 100000, "max_rounds": 10 })).await;
    let seller_policy = json!({ "limit": 70000, "max_auto_rounds": 10, "counter": { "strategy": "bayes" } });
    let buyer_policy = json!({ "limit": 90000, "max_auto_rounds": 10, "counter": { "strategy": "bayes", "e": 0.5 } });
    app.put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, seller_policy.clone()).await.expect(200);
    app.put("/v1/agents/me/policies/buyer", &deal.buyer.key, buyer_policy.clone()).await.expect(200);
    let bad = json!({ "limit": 70000, "counter": { "strategy": "bayes", "e": 0.0 } });
    let resp = app
        .put(format!("/v1/listings/{}/policy", deal.listing), &deal.seller.key, bad)
        .await
        .expect_problem(422, "validation_failed");
    assert_eq!(field_errors(&resp.body), ["counter.e"]);

    let opening = haggle_domain::strategy::model::opening(Prices { limit: 90000, ask: 100000 });
    let (_, thread_id) = open(&app, &deal.buyer, &deal.listing, opening).await;
    let done = ended(&app, &deal.seller, &thread_id).await;
    assert_eq!(done["status"], "ACCEPTED", "overlapping limits and the whole of max_rounds: {done}");
    assert!(amounts_by(&done, "seller").iter().all(|&a| a >= 70000), "{done}");
    assert!(amounts_by(&done, "buyer").iter().all(|&a| a <= 90000), "{done}");
    let seller: Policy = serde_json::from_value(seller_policy).unwrap();
    let buyer: Policy = serde_json::from_value(buyer_policy).unwrap();
    assert_played_by(&done, 100000, 10, &seller, &buyer);
}
