//! The limits meant for an agent hold for the deployment: instances count each other through
//! the database and each grants its share, so that three instances do not give an agent three
//! times its rate or its streams.

use std::time::{Duration, Instant};

use reqwest::Method;

use crate::support::{Body, TestApp};

/// Waits until the instance counts `instances` in the deployment, as `/readyz` says.
async fn until_counted(app: &TestApp, instances: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = app.send(Method::GET, "/readyz", None, Body::None, &[]).await.expect(200);
        if ready.body["instances"] == instances {
            return;
        }
        assert!(Instant::now() < deadline, "the instance never counted {instances}: {}", ready.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn two_instances_share_an_agents_request_rate() {
    let limited = |config: &mut haggle_server::app::AppConfig| config.settings.rate_limit = 10;
    let a = TestApp::spawn_with(limited).await;
    let b = a.another_instance_with(limited).await;
    let agent = a.register("spread").await;
    until_counted(&a, 2).await;
    until_counted(&b, 2).await;
    // Twenty requests spread over both: each instance grants its half of the ten a second
    // (and what refills meanwhile), not ten of its own.
    let (granted, took) = quick_round(|| async {
        let mut granted = 0;
        for i in 0..20 {
            let app = if i % 2 == 0 { &a } else { &b };
            let resp = app.get("/v1/agents/me", &agent.key).await;
            match resp.status {
                200 => granted += 1,
                _ => assert_eq!(resp.expect_problem(429, "rate_limited").header("retry-after"), Some("1")),
            }
        }
        granted
    })
    .await;
    let refilled = (took.as_secs_f64() * 10.0).ceil() as usize;
    assert!(granted >= 10 && granted <= 10 + refilled, "granted {granted} of 20 (refilled up to {refilled})");

    // When one instance stops, the other takes the whole rate again: ten at once, where its
    // half would have granted five and what refilled in less than a second.
    drop(b);
    until_counted(&a, 1).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (granted, _) = quick_round(|| granted_of(&a, &agent.key, 10)).await;
    assert_eq!(granted, 10);
}

/// Runs a round of requests until one takes less than the `QUICK` that lets its grants tell a
/// share of the rate from the whole: the buckets refill while a round runs, and one that took
/// a second would refill enough to grant everything, proving nothing. Between rounds the
/// buckets fill again.
async fn quick_round<F: std::future::Future<Output = usize>>(mut round: impl FnMut() -> F) -> (usize, Duration) {
    const QUICK: Duration = Duration::from_millis(900);
    for _ in 0..5 {
        let started = Instant::now();
        let granted = round().await;
        let took = started.elapsed();
        if took < QUICK {
            return (granted, took);
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    panic!("no round of requests took less than {QUICK:?}, too slow to tell a share of the rate from the whole");
}

async fn granted_of(app: &TestApp, key: &str, requests: usize) -> usize {
    let mut granted = 0;
    for _ in 0..requests {
        if app.get("/v1/agents/me", key).await.status == 200 {
            granted += 1;
        }
    }
    granted
}

#[tokio::test]
async fn two_instances_share_an_agents_streams() {
    let four = |config: &mut haggle_server::app::AppConfig| config.settings.max_waiters_per_agent = 4;
    let a = TestApp::spawn_with(four).await;
    let b = a.another_instance_with(four).await;
    let agent = a.register("listener").await;
    until_counted(&a, 2).await;
    // Two long polls on this instance are its share of the agent's four.
    let hold = || {
        let (base, key, client) = (a.base.clone(), agent.key.clone(), a.client.clone());
        tokio::spawn(async move {
            client.get(format!("{base}/v1/events?after=0&wait=30")).bearer_auth(key).send().await.map(|r| r.status())
        })
    };
    let held = [hold(), hold()];
    let deadline = Instant::now() + Duration::from_secs(20);
    let refused = loop {
        assert!(Instant::now() < deadline, "the share was never taken");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let resp = a.get("/v1/events?after=0&wait=1", &agent.key).await;
        if resp.status == 429 {
            break resp;
        }
    };
    let detail = refused.expect_problem(429, "rate_limited").body["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("2 long polls") && detail.contains("the 4"), "{detail}");
    // The other instance has a share of its own.
    b.get("/v1/events?after=0&wait=0", &agent.key).await.expect(200);
    // With the other instance gone, this one takes the whole limit.
    drop(b);
    until_counted(&a, 1).await;
    a.get("/v1/events?after=0&wait=0", &agent.key).await.expect(200);
    for waiter in held {
        waiter.abort();
    }
}
