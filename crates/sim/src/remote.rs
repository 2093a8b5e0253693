//! `haggle sim --http`: the same market, played against a running server.
//!
//! The strategies decide on this side, with the code the in-process market uses; each move is a
//! call of the typed client as the agent it belongs to, and what the books record is read from
//! the server's answers: every bid's author, amount and finality, whose turn it is, the deal price
//! from the order, and who rejected. Each negotiation gets a listing of its own from its seller
//! (ask = cost × (1 + markup), `max_rounds`, quantity 1, open to the buyers' tier), so
//! negotiations are independent of each other and may run concurrently.
//!
//! A side that stops without answering leaves its thread open on the server, as an agent that
//! walks away without a word does.

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use futures::{StreamExt as _, TryStreamExt as _};

use haggle_client::{Bid, BidAndThread, Client, ClientError, CounterOffer, NewListing, Placement, ProfilePatch};
use haggle_domain::bid::Party;
use haggle_domain::strategy::{Decision, Negotiator, PlacedBid, Setting};
use haggle_domain::tier::Tier;

use super::market::{Ending, Market, Meeting, Played, Venue};
use super::roster::Mix;
use haggle_domain::strategy::state_after;

/// The server's operator token, from `--admin-token` or `HAGGLE_ADMIN_TOKEN`; never printed.
#[derive(Clone)]
pub struct AdminToken(String);

impl FromStr for AdminToken {
    type Err = Infallible;

    fn from_str(text: &str) -> Result<AdminToken, Infallible> {
        Ok(AdminToken(text.to_owned()))
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The codes of a move the server refuses by the bid rules. The in-process market books such a
/// move as a broken strategy's; so does this one.
const RULE_CODES: [&str; 5] =
    ["not_a_concession", "final_offer", "validation_failed", "not_your_turn", "invalid_transition"];

/// The option that names the server, for the advice when it cannot be worked with.
const SERVER_FLAG: &str = "--http";

/// How many times in all a call is sent while the server answers that it is busy.
const PATIENCE: u32 = 8;

/// Sends a call again, after a pause, while the server answers `rate_limited` or `unavailable`:
/// it did nothing with such a request, so sending it again is safe.
async fn patiently<T, F, Fut>(mut call: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let mut attempt = 1;
    loop {
        match call().await {
            Err(error) if attempt < PATIENCE && matches!(error.code(), Some("rate_limited" | "unavailable")) => {
                tokio::time::sleep(Duration::from_millis(250 * u64::from(attempt))).await;
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

/// A running server with the market's agents registered on it.
pub struct Server {
    buyers: Vec<Client>,
    sellers: Vec<Client>,
}

impl Server {
    /// Checks the server (and the admin token, when the buyers' tier needs one), registers one
    /// agent per buyer and seller of `market`, and raises the buyers to the market's tier.
    /// `registered` hears (agents registered, agents).
    pub async fn open(
        url: &str,
        admin_token: Option<&AdminToken>,
        market: &Market,
        concurrency: usize,
        registered: &mut dyn FnMut(usize, usize),
    ) -> anyhow::Result<Server> {
        let anonymous = Client::new(url, None).context("--http")?;
        anonymous.ready().await.map_err(|error| error.first_contact(anonymous.base_url(), SERVER_FLAG))?;
        let tier = market.ranges.tier;
        let admin = match tier {
            Tier::Public => None,
            Tier::Seat | Tier::Agency | Tier::Advertiser => {
                let Some(token) = admin_token.map(|token| token.0.trim()).filter(|token| !token.is_empty()) else {
                    bail!(
                        "the sim needs the server's operator token to raise its buyers to the {tier} tier: pass \
                         --admin-token or set HAGGLE_ADMIN_TOKEN to the token the server was started with \
                         (or play --tier PUBLIC, which needs none)"
                    );
                };
                let admin = anonymous.with_api_key(token);
                match admin.check_admin_token().await {
                    Ok(()) => {}
                    Err(error) if matches!(error.status(), Some(401 | 403)) => bail!(
                        "the server refused the admin token ({error}). Pass --admin-token or set HAGGLE_ADMIN_TOKEN \
                         to the token the server was started with; the sim needs it to raise its buyers to the \
                         {tier} tier"
                    ),
                    Err(error) => return Err(error.first_contact(anonymous.base_url(), SERVER_FLAG)),
                }
                Some(admin)
            }
        };
        let names = |side: Party, mix: &Mix| {
            let names = mix.agents().into_iter().enumerate();
            names.map(|(i, kind)| (side, format!("sim-{}-{i}-{kind}", side.as_str()))).collect::<Vec<_>>()
        };
        let agents = [names(Party::Buyer, &market.buyers), names(Party::Seller, &market.sellers)].concat();
        let total = agents.len();
        let mut registering = futures::stream::iter(agents)
            .map(|(side, name)| {
                let (anonymous, admin) = (&anonymous, admin.as_ref());
                async move {
                    let agent = patiently(|| anonymous.register(&name)).await.map_err(|error| match error.code() {
                        Some("forbidden") => anyhow!(
                            "the server at {} does not take registrations ({}). The sim registers its own \
                             agents: start the server with HAGGLE_OPEN_REGISTRATION=true",
                            anonymous.base_url(),
                            error.problem().map_or("", |problem| problem.detail.as_str())
                        ),
                        _ => error.first_contact(anonymous.base_url(), SERVER_FLAG),
                    })?;
                    if let (Party::Buyer, Some(admin)) = (side, admin) {
                        let update = ProfilePatch::tier(tier);
                        let raised = patiently(|| admin.update_agent(agent.agent.id, &update))
                            .await
                            .with_context(|| format!("raising {name} to the {tier} tier"))?;
                        if raised.tier != tier {
                            bail!("the server kept {name} at {} when asked for {tier}", raised.tier);
                        }
                    }
                    Ok::<_, anyhow::Error>((side, anonymous.with_api_key(agent.api_key)))
                }
            })
            .buffered(concurrency.max(1));
        let (mut buyers, mut sellers) = (Vec::new(), Vec::new());
        while let Some((side, client)) = registering.try_next().await? {
            match side {
                Party::Buyer => buyers.push(client),
                Party::Seller => sellers.push(client),
            }
            registered(buyers.len() + sellers.len(), total);
        }
        Ok(Server { buyers, sellers })
    }

    async fn negotiate(
        &self,
        meeting: &Meeting,
        setting: &Setting,
        buyer: &dyn Negotiator,
        seller: &dyn Negotiator,
    ) -> anyhow::Result<Played> {
        let which = || {
            format!(
                "round {}, buyer {} ({}) with seller {} ({})",
                meeting.round + 1,
                meeting.buyer,
                meeting.buyer_kind,
                meeting.seller,
                meeting.seller_kind
            )
        };
        let agents = |side: Party| match side {
            Party::Buyer => (buyer, &self.buyers[meeting.buyer]),
            Party::Seller => (seller, &self.sellers[meeting.seller]),
        };
        let listing = NewListing {
            quantity: Some(1),
            max_rounds: Some(i64::from(setting.max_rounds)),
            min_negotiation_tier: Some(setting.buyer_tier),
            ..NewListing::new(
                format!("sim round {}: seller {} for buyer {}", meeting.round + 1, meeting.seller, meeting.buyer),
                setting.ask,
            )
        };
        let listing = patiently(|| agents(Party::Seller).1.create_listing(&listing))
            .await
            .with_context(|| format!("{}: creating the listing", which()))?;

        let mut bids: Vec<PlacedBid> = Vec::new();
        let mut pending: Option<Bid> = None;
        let mut mover = Party::Buyer;
        let ending = loop {
            let (negotiator, client) = agents(mover);
            let decision = negotiator.next(&state_after(setting, &bids, mover));
            let moved = match (decision, &pending) {
                (Decision::Accept { .. }, Some(bid)) => match patiently(|| client.accept(bid.id)).await {
                    Ok(answer) => {
                        let order =
                            answer.order.ok_or_else(|| anyhow!("{}: an accept answered without an order", which()))?;
                        break Ending::Deal(order.amount);
                    }
                    Err(error) => Err(error),
                },
                (Decision::Reject { .. }, Some(bid)) => match patiently(|| client.reject(bid.id)).await {
                    Ok(answer) => break Ending::NoDeal(answer.bid.author.other()),
                    Err(error) => Err(error),
                },
                // Nothing to answer: there is no call to make, and no server would take one.
                (Decision::Accept { .. } | Decision::Reject { .. }, None) => break Ending::Refused(mover),
                (Decision::Stop { .. }, _) => break Ending::NoDeal(mover),
                (Decision::Counter { amount, .. }, None) => {
                    let placement = Placement::new(amount);
                    patiently(|| client.place_bid(listing.id, &placement)).await
                }
                (Decision::Counter { amount, is_final }, Some(bid)) => {
                    let offer = CounterOffer::new(amount, is_final);
                    patiently(|| client.counter(bid.id, &offer)).await
                }
            };
            match moved {
                Ok(BidAndThread { bid, thread }) => {
                    bids.push(PlacedBid { author: bid.author, amount: bid.amount, is_final: bid.is_final });
                    mover = thread.turn.ok_or_else(|| anyhow!("{}: the thread is over after a counter", which()))?;
                    pending = Some(bid);
                }
                Err(error) if error.code().is_some_and(|code| RULE_CODES.contains(&code)) => {
                    break Ending::Refused(mover);
                }
                Err(error) => return Err(anyhow::Error::new(error).context(which())),
            }
        };
        Ok(Played::checked(meeting.value, meeting.cost, bids, ending))
    }
}

impl Venue for Server {
    fn play(
        &self,
        meeting: &Meeting,
        setting: &Setting,
        buyer: &dyn Negotiator,
        seller: &dyn Negotiator,
    ) -> impl Future<Output = anyhow::Result<Played>> {
        self.negotiate(meeting, setting, buyer, seller)
    }
}
