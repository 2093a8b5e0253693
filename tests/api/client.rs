//! The typed client against a live server.

use haggle_client::{
    AdminAgentQuery, AdminOrderQuery, AdminPageQuery, AdminThreadQuery, AdminWebhookQuery, AgentStatus, Client,
    ClientError, CounterOffer, DisputeDecision, EventQuery, Fulfil, ListingQuery, NewListing, NewPayment,
    OpenNegotiation, OrderQuery, OrderStatus, PageQuery, PaymentDispute, PaymentStatus, Placement, PolicyScope,
    StatsQuery, ThreadQuery,
};
use haggle_domain::strategy::{Policy, Strategy};
use haggle_domain::{BidStatus, ListingStatus, Party, ThreadKind, ThreadStatus, Tier};
use uuid::Uuid;

use crate::support::TestApp;

/// A seller client, an AGENCY buyer client, and their keys.
pub(crate) async fn parties(app: &TestApp) -> (Client, Client, String, String) {
    let anonymous = Client::new(&app.base, None).unwrap();
    let seller = anonymous.register("desk-seller").await.unwrap();
    assert_eq!(seller.agent.tier, Tier::Public);
    assert!(seller.api_key.starts_with("hk_"));
    let buyer = app.buyer("desk-buyer").await;
    (anonymous.with_api_key(&seller.api_key), anonymous.with_api_key(&buyer.key), seller.api_key, buyer.key)
}

#[tokio::test]
async fn a_whole_negotiation_runs_through_the_typed_client() {
    let app = TestApp::spawn().await;
    let (seller, buyer, _, _) = parties(&app).await;
    assert_eq!(buyer.me().await.unwrap().tier, Tier::Agency);

    let listing = seller.create_listing(&NewListing::new("Standing desk", 138_000)).await.unwrap();
    assert_eq!((listing.status, listing.ask_amount, listing.max_rounds), (ListingStatus::Active, 138_000, 10));
    assert_eq!(buyer.get_listing(listing.id).await.unwrap(), listing);

    let placed = buyer.place_bid(listing.id, &Placement::new(120_000)).await.unwrap();
    assert_eq!((placed.bid.round, placed.bid.status), (1, BidStatus::Pending));
    assert_eq!(placed.thread.turn, Some(Party::Seller));

    let countered = seller.counter(placed.bid.id, &CounterOffer::new(135_000, false)).await.unwrap();
    assert_eq!((countered.bid.round, countered.bid.author), (2, Party::Seller));
    // A bid no longer pending is answered at once, even when asked to wait.
    let first = buyer.get_bid(placed.bid.id, Some(30.0)).await.unwrap();
    assert_eq!(first.status, BidStatus::Countered);

    let again = buyer.counter(countered.bid.id, &CounterOffer::new(130_000, false)).await.unwrap();
    let accepted = seller.accept(again.bid.id).await.unwrap();
    let order = accepted.order.expect("an accept makes an order");
    assert_eq!((order.amount, order.status.as_str()), (130_000, "CONFIRMED"));
    assert_eq!(accepted.thread.status, ThreadStatus::Accepted);

    let thread = buyer.get_thread(placed.thread.id).await.unwrap();
    assert_eq!(thread.thread.status, ThreadStatus::Accepted);
    assert_eq!(thread.thread.turn, None);
    assert_eq!(thread.bids.iter().map(|bid| bid.amount).collect::<Vec<_>>(), vec![120_000, 135_000, 130_000]);
    let orders = buyer.list_orders(&OrderQuery { role: Some(Party::Buyer), ..OrderQuery::default() }).await.unwrap();
    assert_eq!(orders.data.iter().map(|o| o.id).collect::<Vec<_>>(), vec![order.id]);
    assert_eq!(seller.get_order(order.id).await.unwrap().order, order);
    // Every POST went with an Idempotency-Key of its own: the buyer placed and countered.
    let buyer_id = buyer.me().await.unwrap().id;
    let keyed = app.count(format!("SELECT count(*) FROM idempotency_keys WHERE agent_id = '{buyer_id}'")).await;
    assert_eq!(keyed, 2);
    let mine = buyer.list_threads(&ThreadQuery { role: Some(Party::Buyer), ..ThreadQuery::default() }).await.unwrap();
    assert_eq!(mine.data.len(), 1);
    assert_eq!(mine.data[0].rounds, 3);

    // The buyer's events tell the story; they are published just after their commit, so wait.
    let mut after = 0;
    let mut kinds = Vec::new();
    while !kinds.iter().any(|kind| kind == "order.created") {
        let page = buyer.events(&EventQuery { after, limit: Some(50), wait: Some(5.0) }).await.unwrap();
        assert!(!page.data.is_empty(), "events stopped at {kinds:?}");
        after = page.next_cursor;
        kinds.extend(page.data.into_iter().map(|event| event.kind.to_string()));
    }
    assert_eq!(kinds, ["bid.placed", "bid.countered", "bid.countered", "bid.accepted", "order.created"]);

    // Buying at the ask, and withdrawing a bid of my own.
    let lamp =
        seller.create_listing(&NewListing { quantity: Some(2), ..NewListing::new("Lamp", 5_000) }).await.unwrap();
    let bought = buyer.purchase(lamp.id).await.unwrap();
    assert_eq!((bought.order.amount, bought.order.bid_id), (5_000, None));
    let placed = buyer.place_bid(lamp.id, &Placement::new(4_000)).await.unwrap();
    let withdrawn = buyer.withdraw(placed.bid.id).await.unwrap();
    assert_eq!((withdrawn.thread.status, withdrawn.order), (ThreadStatus::Rejected, None));
    let rejected_thread = buyer.place_bid(lamp.id, &Placement::new(4_100)).await.unwrap();
    let rejected = seller.reject(rejected_thread.bid.id).await.unwrap();
    assert_eq!(rejected.bid.status, BidStatus::Rejected);

    // The order's life: paid in two parts, one disputed, fulfilled and completed.
    let lamp_order = bought.order.id;
    let paid = buyer.record_payment(lamp_order, &NewPayment { amount: 3_000.into(), reference: "ch_1".into() }).await;
    let paid = paid.unwrap();
    assert_eq!((paid.payment.status, paid.order.outstanding), (PaymentStatus::Recorded, 5_000));
    let confirmed = seller.confirm_payment(lamp_order, paid.payment.id).await.unwrap();
    assert_eq!((confirmed.order.paid_amount, confirmed.order.outstanding), (3_000, 2_000));
    let over = buyer.record_payment(lamp_order, &NewPayment { amount: 2_001.into(), reference: "ch_2".into() }).await;
    assert_eq!(over.unwrap_err().code(), Some("exceeds_outstanding"));
    let rest = buyer.record_payment(lamp_order, &NewPayment { amount: 2_000.into(), reference: "ch_2".into() }).await;
    let rest = rest.unwrap().payment.id;
    let disputed =
        seller.dispute_payment(lamp_order, rest, &PaymentDispute { reason: "not received".into() }).await.unwrap();
    assert_eq!(disputed.payment.status, PaymentStatus::Disputed);
    let fulfil = Fulfil { reference: Some("pickup 7".into()), note: None };
    let fulfilled = seller.fulfil_order(lamp_order, &fulfil).await.unwrap();
    assert_eq!(fulfilled.order.status, OrderStatus::Fulfilled);
    assert_eq!(fulfilled.payments.len(), 2);

    // A refund asked, refused past what was paid, then agreed: the order records it.
    let refund = |amount: i64| OpenNegotiation {
        kind: ThreadKind::Refund,
        amount: Some(amount.into()),
        terms: serde_json::json!({ "reason": "missing", "evidence": ["https://photos.example.com/box.jpg"] }),
        message: None,
        expires_in: None,
        is_final: None,
    };
    let over = buyer.open_negotiation(lamp_order, &refund(3_001)).await.unwrap_err();
    assert_eq!(over.code(), Some("exceeds_refundable"));
    let opened = buyer.open_negotiation(lamp_order, &refund(1_000)).await.unwrap();
    assert_eq!((opened.thread.kind, opened.thread.order_id), (ThreadKind::Refund, Some(lamp_order)));
    assert_eq!(buyer.complete_order(lamp_order).await.unwrap_err().code(), Some("negotiation_open"));
    let agreed = seller.accept(opened.bid.id).await.unwrap();
    assert_eq!(agreed.order.map(|order| order.refunded_amount), Some(1_000));
    assert_eq!(buyer.escalate_thread(opened.thread.id).await.unwrap_err().code(), Some("invalid_transition"));

    let completed = buyer.complete_order(lamp_order).await.unwrap();
    assert_eq!(completed.order.status, OrderStatus::Completed);
    assert_eq!(buyer.complete_order(lamp_order).await.unwrap_err().code(), Some("invalid_transition"));
}

#[tokio::test]
async fn refusals_come_back_as_typed_problems() {
    let app = TestApp::spawn().await;
    let (seller, buyer, _, _) = parties(&app).await;

    let missing = buyer.get_listing(Uuid::now_v7()).await.unwrap_err();
    assert_eq!((missing.status(), missing.code()), (Some(404), Some("not_found")));
    assert!(missing.to_string().starts_with("404 not_found: "), "{missing}");

    let invalid = seller.create_listing(&NewListing::new("", 10)).await.unwrap_err();
    assert_eq!((invalid.status(), invalid.code()), (Some(422), Some("validation_failed")));
    let problem = invalid.problem().unwrap();
    let fields: Vec<&str> = problem.errors.iter().map(|e| e.field.as_str()).collect();
    assert!(fields.contains(&"title") && fields.contains(&"ask_amount"), "{fields:?}");
    assert!(invalid.to_string().contains("ask_amount: "), "{invalid}");

    let listing = seller.create_listing(&NewListing::new("Desk", 100_000)).await.unwrap();
    let placed = buyer.place_bid(listing.id, &Placement::new(80_000)).await.unwrap();
    let own = buyer.accept(placed.bid.id).await.unwrap_err();
    assert_eq!((own.status(), own.code()), (Some(403), Some("not_your_turn")));

    let greedy = seller.counter(placed.bid.id, &CounterOffer::new(120_000, false)).await.unwrap_err();
    let problem = greedy.problem().unwrap();
    assert_eq!((problem.status, problem.code.as_str()), (422, "not_a_concession"));
    assert_eq!((problem.min_amount, problem.max_amount), (Some(80_001), Some(100_000)));

    let again = buyer.place_bid(listing.id, &Placement::new(81_000)).await.unwrap_err();
    assert_eq!(again.code(), Some("thread_active"));
    assert_eq!(again.problem().unwrap().thread_id, Some(placed.thread.id));

    seller.reject(placed.bid.id).await.unwrap();
    let twice = seller.reject(placed.bid.id).await.unwrap_err();
    assert_eq!(twice.code(), Some("invalid_transition"));
    assert_eq!(twice.problem().unwrap().current_status.as_deref(), Some("REJECTED"));

    let nobody = Client::new(&app.base, None).unwrap().me().await.unwrap_err();
    assert_eq!(nobody.code(), Some("unauthenticated"));

    // Nothing listens on port 1: a transport error, with no code, after the retries.
    let unreachable = Client::new("http://127.0.0.1:1", None).unwrap().me().await.unwrap_err();
    assert!(matches!(unreachable, ClientError::Transport { .. }), "{unreachable:?}");
    assert_eq!((unreachable.code(), unreachable.status()), (None, None));
    assert!(unreachable.to_string().contains("no answer from the server"), "{unreachable}");
    assert!(matches!(Client::new("ftp://example.com", None), Err(ClientError::InvalidUrl { .. })));
}

/// A proxy to `upstream` that loses the answer to the first request: it forwards the request,
/// waits until the server answers (the effect is committed by then) and hangs up.
async fn answer_losing_proxy(upstream: &str) -> String {
    use tokio::io::AsyncReadExt;
    let upstream = upstream.trim_start_matches("http://").to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut inbound, _)) = listener.accept().await {
            let mut outbound = tokio::net::TcpStream::connect(&upstream).await.unwrap();
            if std::mem::take(&mut first) {
                let (mut request, answer) = inbound.into_split();
                let (mut response, mut forward) = outbound.into_split();
                let copy = tokio::spawn(async move { tokio::io::copy(&mut request, &mut forward).await });
                let _ = response.read(&mut [0; 1]).await;
                copy.abort();
                drop(answer);
            } else {
                tokio::spawn(async move { tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await });
            }
        }
    });
    format!("http://{address}")
}

#[tokio::test]
async fn a_move_whose_answer_was_lost_is_retried_and_made_once() {
    let app = TestApp::spawn().await;
    let (seller, _, _, buyer_key) = parties(&app).await;
    let listing = seller.create_listing(&NewListing::new("Desk", 100_000)).await.unwrap();
    let proxy = answer_losing_proxy(&app.base).await;
    let buyer = Client::new(&proxy, Some(buyer_key)).unwrap();

    // The first attempt placed the bid; the retry, under the same key, gets its answer again
    // instead of `409 thread_active`.
    let placed = buyer.place_bid(listing.id, &Placement::new(90_000)).await.unwrap();
    assert_eq!(app.count("SELECT count(*) FROM bids").await, 1);
    let stored: Uuid = sqlx::query_scalar("SELECT id FROM bids").fetch_one(&app.pool).await.unwrap();
    assert_eq!(placed.bid.id, stored);
}

#[tokio::test]
async fn pages_follow_the_cursor_to_the_end() {
    let app = TestApp::spawn().await;
    let (seller, buyer, _, _) = parties(&app).await;
    let mut created = Vec::new();
    for i in 0..5 {
        created.push(seller.create_listing(&NewListing::new(format!("Chair {i}"), 10_000 + i)).await.unwrap().id);
    }
    let me = seller.me().await.unwrap();
    let mut query = ListingQuery { seller_id: Some(me.id), limit: Some(2), ..ListingQuery::default() };
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = buyer.list_listings(&query).await.unwrap();
        pages += 1;
        assert!(page.data.len() <= 2);
        seen.extend(page.data.iter().map(|listing| listing.id));
        match page.next_cursor {
            Some(cursor) => query.cursor = Some(cursor),
            None => break,
        }
    }
    created.reverse();
    assert_eq!(seen, created, "newest first, each once");
    assert!(pages >= 3);

    let filtered =
        buyer.list_listings(&ListingQuery { q: Some("chair 3".to_owned()), ..ListingQuery::default() }).await.unwrap();
    assert_eq!(filtered.data.len(), 1);
    let sold = buyer
        .list_listings(&ListingQuery { status: Some(ListingStatus::Sold), ..ListingQuery::default() })
        .await
        .unwrap();
    assert!(sold.data.is_empty());
}

#[tokio::test]
async fn the_operators_lists_take_the_same_query_types() {
    let app = TestApp::spawn().await;
    let (seller, buyer, _, _) = parties(&app).await;
    let operator = Client::new(&app.base, Some(crate::support::ADMIN_TOKEN.to_owned())).unwrap();
    let buyer_id = buyer.me().await.unwrap().id;
    let listing = seller.create_listing(&NewListing::new("Lamp", 9_000)).await.unwrap();
    let placed = buyer.place_bid(listing.id, &Placement::new(8_000)).await.unwrap();
    let order = seller.accept(placed.bid.id).await.unwrap().order.expect("an accept makes an order");
    let an_hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);

    let agencies = AdminAgentQuery {
        tier: Some(Tier::Agency),
        status: Some(AgentStatus::Active),
        limit: Some(1),
        ..AdminAgentQuery::default()
    };
    let agents = operator.admin_agents(&agencies).await.unwrap();
    assert_eq!(agents.data.iter().map(|agent| agent.id).collect::<Vec<_>>(), vec![buyer_id]);
    let suspended = AdminAgentQuery { status: Some(AgentStatus::Suspended), ..AdminAgentQuery::default() };
    assert!(operator.admin_agents(&suspended).await.unwrap().data.is_empty());
    assert_eq!(operator.admin_keys(buyer_id, &AdminPageQuery::default()).await.unwrap().data.len(), 1);
    assert_eq!(buyer.list_keys(&PageQuery::default()).await.unwrap().data.len(), 1);

    let threads = AdminThreadQuery {
        status: Some(ThreadStatus::Accepted),
        agent_id: Some(buyer_id),
        since: Some(an_hour_ago),
        ..AdminThreadQuery::default()
    };
    let threads = operator.admin_threads(&threads).await.unwrap();
    assert_eq!(threads.data.iter().map(|thread| thread.id).collect::<Vec<_>>(), vec![placed.thread.id]);
    let orders =
        AdminOrderQuery { listing_id: Some(listing.id), since: Some(an_hour_ago), ..AdminOrderQuery::default() };
    assert_eq!(
        operator.admin_orders(&orders).await.unwrap().data.iter().map(|o| o.id).collect::<Vec<_>>(),
        vec![order.id]
    );

    // A refund rejected, escalated by the buyer, and decided by the operator.
    let paid = buyer.record_payment(order.id, &NewPayment { amount: 8_000.into(), reference: "ch".into() }).await;
    seller.confirm_payment(order.id, paid.unwrap().payment.id).await.unwrap();
    let opening = OpenNegotiation {
        kind: ThreadKind::Refund,
        amount: Some(2_000.into()),
        terms: serde_json::json!({ "reason": "other" }),
        message: None,
        expires_in: None,
        is_final: None,
    };
    let opened = buyer.open_negotiation(order.id, &opening).await.unwrap();
    seller.reject(opened.bid.id).await.unwrap();
    buyer.escalate_thread(opened.thread.id).await.unwrap();
    let escalated = AdminThreadQuery { escalated: Some(true), ..AdminThreadQuery::default() };
    let waiting = operator.admin_threads(&escalated).await.unwrap();
    assert_eq!(waiting.data.iter().map(|thread| thread.id).collect::<Vec<_>>(), vec![opened.thread.id]);
    let decision = DisputeDecision { amount: 1_500, note: "a scratch, not a crack".into() };
    let decided = operator.admin_decide(opened.thread.id, &decision).await.unwrap();
    assert_eq!(decided.order.refunded_amount, 1_500);
    assert_eq!(decided.thread.escalation.and_then(|escalation| escalation.decision).map(|d| d.amount), Some(1_500));
    assert_eq!(buyer.admin_decide(opened.thread.id, &decision).await.unwrap_err().code(), Some("forbidden"));

    let failing = AdminWebhookQuery { failing: Some(true), ..AdminWebhookQuery::default() };
    assert!(operator.admin_webhooks(&failing).await.unwrap().data.is_empty());
    assert_eq!(operator.market_stats(&StatsQuery { hours: Some(2) }).await.unwrap().per_hour.len(), 2);

    // Bounds the types cannot hold are the server's, and refused the same way.
    let too_many = AdminAgentQuery { limit: Some(201), ..AdminAgentQuery::default() };
    match operator.admin_agents(&too_many).await {
        Err(ClientError::Api(problem)) => {
            assert_eq!((problem.status, problem.code.as_str()), (422, "validation_failed"))
        }
        other => panic!("expected a validation failure, got {other:?}"),
    }
}

#[tokio::test]
async fn policies_are_set_read_and_deleted_per_scope() {
    let app = TestApp::spawn().await;
    let (seller, buyer, _, _) = parties(&app).await;
    let listing = seller.create_listing(&NewListing::new("Brass lamp", 35_000)).await.unwrap();

    let stored =
        seller.set_policy(PolicyScope::Listing(listing.id), &Policy::new(28_000, Strategy::Tier {})).await.unwrap();
    assert_eq!((stored.scope.as_str(), stored.role, stored.listing_id), ("listing", Party::Seller, Some(listing.id)));
    assert_eq!(seller.get_policy(PolicyScope::Listing(listing.id)).await.unwrap().policy.limit, 28_000);

    let step = Strategy::Step { amount: Some(1_500), fraction: None };
    let stored = buyer.set_policy(PolicyScope::Agent(Party::Buyer), &Policy::new(31_000, step)).await.unwrap();
    assert_eq!((stored.scope.as_str(), stored.role), ("agent", Party::Buyer));

    let too_high = seller.set_policy(PolicyScope::Listing(listing.id), &Policy::new(40_000, Strategy::Split {})).await;
    let too_high = too_high.unwrap_err();
    assert_eq!(too_high.code(), Some("validation_failed"));
    assert_eq!(too_high.problem().unwrap().errors[0].field, "limit");

    // Both policies play the whole negotiation on the server from one opening bid.
    let placed = buyer.place_bid(listing.id, &Placement::new(25_000)).await.unwrap();
    let mut thread = buyer.get_thread(placed.thread.id).await.unwrap();
    for _ in 0..20 {
        if thread.thread.status != ThreadStatus::Active {
            break;
        }
        buyer.get_bid(thread.thread.last_bid_id, Some(5.0)).await.unwrap();
        thread = buyer.get_thread(placed.thread.id).await.unwrap();
    }
    assert_eq!(thread.thread.status, ThreadStatus::Accepted);
    let policy = PolicyScope::Thread(placed.thread.id);
    assert_eq!(buyer.get_policy(policy).await.unwrap_err().code(), Some("not_found"));

    buyer.delete_policy(PolicyScope::Agent(Party::Buyer)).await.unwrap();
    let gone = buyer.get_policy(PolicyScope::Agent(Party::Buyer)).await.unwrap_err();
    assert_eq!(gone.code(), Some("not_found"));
}
