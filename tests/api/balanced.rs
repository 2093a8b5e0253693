//! Behind the shipped HAProxy configuration (`deploy/haproxy/`), started as the chaos run starts
//! it: the instance trusts the proxy's `X-Forwarded-For`, so each client is counted apart.

use std::net::{IpAddr, Ipv4Addr};

use haggle_chaos::balancer::{self, Balancer};
use serde_json::Value;

use crate::support::{ADMIN_TOKEN, TestApp, scratch_dir};

/// A client whose connections come from `address` (any of 127.0.0.0/8 reaches loopback).
fn client_at(address: Ipv4Addr) -> reqwest::Client {
    reqwest::Client::builder().no_proxy().local_address(IpAddr::V4(address)).build().unwrap()
}

async fn get(client: &reqwest::Client, url: &str, key: &str) -> (u16, Value) {
    let response = client.get(url).bearer_auth(key).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn one_clients_wrong_guesses_through_the_proxy_leave_anothers_calls_alone() {
    let haproxy = balancer::find(None).expect("HAProxy is needed for this test: apt-get install haproxy");
    let app = TestApp::spawn_with(|config| config.settings.trusted_proxies = "127.0.0.1".parse().unwrap()).await;
    let agent = app.register("honest").await;
    let port: u16 = app.base.rsplit(':').next().unwrap().parse().unwrap();
    let dir = scratch_dir();
    let ports = haggle_chaos::free_ports(2).unwrap();
    let proxy = Balancer::start(&haproxy, dir.path(), ports[0], ports[1], &[port, port, port]).await.unwrap();
    let me = format!("{}/v1/agents/me", proxy.base_url());

    // The guesser, from 127.0.0.2: 20 wrong keys answered 401, then 429.
    let guesser = client_at(Ipv4Addr::new(127, 0, 0, 2));
    let mut statuses = Vec::new();
    for n in 0..25 {
        statuses.push(get(&guesser, &me, &format!("hk_{n:08}_wrong_{n:032}")).await.0);
    }
    assert_eq!(statuses, [[401; 20].as_slice(), &[429; 5]].concat());

    // Another client, from 127.0.0.3: its own mistake is only wrong, and its key and the
    // operator token are let in.
    let honest = client_at(Ipv4Addr::new(127, 0, 0, 3));
    assert_eq!(get(&honest, &me, "hk_mistyped_0000000000000000000000000000000000").await.0, 401);
    let (status, body) = get(&honest, &me, &agent.key).await;
    assert_eq!((status, body["id"].as_str()), (200, Some(agent.id.as_str())));
    let stats = format!("{}/v1/admin/stats?hours=1", proxy.base_url());
    assert_eq!(get(&honest, &stats, ADMIN_TOKEN).await.0, 200);
    // And the guesser's own valid key would be too: only wrong ones are refused.
    assert_eq!(get(&guesser, &me, &agent.key).await.0, 200);
    proxy.stop().await;
}
