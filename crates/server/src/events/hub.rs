//! The waiters of one server instance, woken per agent.
//!
//! A waiter subscribes for its agent, marks what it has seen, reads from the database, and
//! only then waits: a wake-up that arrives between the read and the wait is not lost, because
//! the subscription's counter has already moved past the mark.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use uuid::Uuid;

use crate::deployment::Deployment;

/// Long polls, bid waits and streams one agent may have open at once, by default, over the
/// deployment; each instance takes its share ([`Deployment::share_of_count`]).
pub const MAX_WAITERS_PER_AGENT: usize = 100;

/// The key the operator's market-wide waiters subscribe under: woken by every event, whoever it
/// concerns. No agent has this id; the operator's waiters count against its limits as an
/// agent's do.
pub const MARKET: Uuid = Uuid::max();

/// Waiters this instance holds at once, by default, whoever they are.
pub const DEFAULT_MAX_WAITERS: usize = 4096;

/// Why a waiter was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crowded {
    /// The agent has as many waiters on this instance as its share of its limit (the share).
    Agent(usize),
    /// This instance holds as many waiters as it takes.
    Instance,
}

#[derive(Debug, Clone)]
pub struct Hub {
    inner: Arc<Mutex<HashMap<Uuid, watch::Sender<u64>>>>,
    /// Waiters open now, and how many this instance takes.
    open: Arc<std::sync::atomic::AtomicUsize>,
    max_waiters: usize,
    /// The deployment's limit per agent, and the deployment that shares it out.
    per_agent: usize,
    deployment: Arc<Deployment>,
}

impl Default for Hub {
    fn default() -> Hub {
        Hub::with_limits(DEFAULT_MAX_WAITERS, MAX_WAITERS_PER_AGENT, Deployment::new())
    }
}

impl Hub {
    pub fn new() -> Hub {
        Hub::default()
    }

    /// A hub that holds at most `max_waiters` waiters at once, and of one agent its share of
    /// `per_agent` over the deployment.
    pub fn with_limits(max_waiters: usize, per_agent: usize, deployment: Arc<Deployment>) -> Hub {
        Hub { inner: Arc::default(), open: Arc::default(), max_waiters, per_agent, deployment }
    }

    /// A hub of one instance that holds at most `max_waiters` waiters at once.
    pub fn with_limit(max_waiters: usize) -> Hub {
        Hub::with_limits(max_waiters, MAX_WAITERS_PER_AGENT, Deployment::new())
    }

    /// Starts listening for the agent's events; refused when the agent already has its share
    /// of its waiters on this instance, or the instance its limit.
    pub fn subscribe(&self, agent_id: Uuid) -> Result<Subscription, Crowded> {
        let mut map = self.inner.lock().expect("hub lock");
        if self.open.load(std::sync::atomic::Ordering::Relaxed) >= self.max_waiters {
            return Err(Crowded::Instance);
        }
        let share = self.deployment.share_of_count(self.per_agent);
        let sender = map.entry(agent_id).or_insert_with(|| watch::channel(0).0);
        if sender.receiver_count() >= share {
            return Err(Crowded::Agent(share));
        }
        // Counted under the lock, so that the limit holds however many subscribe at once.
        self.open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Subscription { receiver: Some(sender.subscribe()), hub: self.clone(), agent_id })
    }

    /// How many waiters are open on this instance.
    pub fn waiters(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Wakes the waiters of these agents, and the market-wide ones.
    pub fn wake(&self, agents: &[Uuid]) {
        let map = self.inner.lock().expect("hub lock");
        for agent in agents.iter().chain([&MARKET]) {
            if let Some(sender) = map.get(agent) {
                sender.send_modify(|generation| *generation += 1);
            }
        }
    }

    /// Wakes every waiter, to re-read from its cursor (after the listener lost its connection
    /// and may have missed notifications).
    pub fn wake_all(&self) {
        let map = self.inner.lock().expect("hub lock");
        for sender in map.values() {
            sender.send_modify(|generation| *generation += 1);
        }
    }

    /// The agents with a waiter on this instance (the market's key left out).
    pub fn agents(&self) -> Vec<Uuid> {
        let map = self.inner.lock().expect("hub lock");
        map.keys().copied().filter(|agent| *agent != MARKET).collect()
    }

    /// How many agents have a waiter on this instance.
    pub fn agents_waiting(&self) -> usize {
        self.inner.lock().expect("hub lock").len()
    }
}

/// One waiter's subscription; dropping it forgets the agent when it was the last.
#[derive(Debug)]
pub struct Subscription {
    /// Always `Some` until dropped (the drop takes it out under the hub's lock).
    receiver: Option<watch::Receiver<u64>>,
    hub: Hub,
    agent_id: Uuid,
}

impl Subscription {
    /// Marks every wake-up so far as seen. Call it before reading from the database.
    pub fn mark(&mut self) {
        if let Some(receiver) = &mut self.receiver {
            receiver.borrow_and_update();
        }
    }

    /// Waits for a wake-up after the last mark, at most `timeout`. `true` if woken.
    pub async fn wait(&mut self, timeout: Duration) -> bool {
        let Some(receiver) = &mut self.receiver else { return false };
        matches!(tokio::time::timeout(timeout, receiver.changed()).await, Ok(Ok(())))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut map = self.hub.inner.lock().expect("hub lock");
        // The receiver goes under the lock, so that of two subscriptions dropped at once the
        // second always sees the first one gone.
        drop(self.receiver.take());
        self.hub.open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        if map.get(&self.agent_id).is_some_and(|sender| sender.receiver_count() == 0) {
            map.remove(&self.agent_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_has_a_bounded_number_of_waiters() {
        let hub = Hub::new();
        let agent = Uuid::now_v7();
        let held: Vec<Subscription> = (0..MAX_WAITERS_PER_AGENT).map(|_| hub.subscribe(agent).unwrap()).collect();
        assert_eq!(hub.subscribe(agent).unwrap_err(), Crowded::Agent(MAX_WAITERS_PER_AGENT));
        assert!(hub.subscribe(Uuid::now_v7()).is_ok(), "other agents are not affected");
        drop(held);
        assert!(hub.subscribe(agent).is_ok());
    }

    #[test]
    fn an_agent_has_its_share_of_its_waiters_on_each_instance() {
        let deployment = Deployment::new();
        let hub = Hub::with_limits(100, 10, deployment.clone());
        deployment.record(3);
        let agent = Uuid::now_v7();
        let held: Vec<Subscription> = (0..4).map(|_| hub.subscribe(agent).unwrap()).collect();
        assert_eq!(hub.subscribe(agent).unwrap_err(), Crowded::Agent(4));
        // One instance left: the whole limit is its.
        deployment.record(1);
        assert!(hub.subscribe(agent).is_ok());
        drop(held);
    }

    #[test]
    fn an_instance_has_a_bounded_number_of_waiters() {
        let hub = Hub::with_limit(3);
        let held: Vec<Subscription> = (0..3).map(|_| hub.subscribe(Uuid::now_v7()).unwrap()).collect();
        assert_eq!(hub.waiters(), 3);
        assert_eq!(hub.subscribe(Uuid::now_v7()).unwrap_err(), Crowded::Instance);
        drop(held);
        assert_eq!(hub.waiters(), 0);
        assert!(hub.subscribe(Uuid::now_v7()).is_ok());
    }

    #[tokio::test]
    async fn a_wake_between_mark_and_wait_is_not_lost() {
        let hub = Hub::new();
        let agent = Uuid::now_v7();
        let mut subscription = hub.subscribe(agent).unwrap();
        subscription.mark();
        hub.wake(&[agent]);
        assert!(subscription.wait(Duration::from_millis(10)).await);
        subscription.mark();
        assert!(!subscription.wait(Duration::from_millis(10)).await);
    }

    #[tokio::test]
    async fn only_the_agents_concerned_wake_and_empty_entries_go() {
        let hub = Hub::new();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let mut first = hub.subscribe(a).unwrap();
        let mut second = hub.subscribe(a).unwrap();
        let mut other = hub.subscribe(b).unwrap();
        for s in [&mut first, &mut second, &mut other] {
            s.mark();
        }
        hub.wake(&[a]);
        assert!(first.wait(Duration::from_millis(10)).await);
        assert!(second.wait(Duration::from_millis(10)).await);
        assert!(!other.wait(Duration::from_millis(10)).await);
        hub.wake_all();
        assert!(other.wait(Duration::from_millis(10)).await);
        drop(first);
        assert_eq!(hub.agents_waiting(), 2);
        drop(second);
        drop(other);
        assert_eq!(hub.agents_waiting(), 0);
    }
}
