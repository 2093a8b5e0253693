//! `haggle negotiate`: one side of a negotiation played from the terminal, each round drawn on
//! the price ladder as it comes.

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::ValueEnum;
use haggle_client::{
    Client, ClientError, CounterOffer, EventQuery, EventType, OrderQuery, Placement, ThreadQuery, ThreadWithBids,
};
use haggle_domain::money::{Currency, Price};
use haggle_domain::strategy::model::{BAYES_OPENING, BayesBuyer};
use haggle_domain::strategy::{
    Adaptive, Competitive, Decision, MAX_AUTO_ROUNDS, NegotiationState, Policy, Profile, SimpleThreshold, Strategy,
    decide,
};
use haggle_domain::{Party, ThreadKind, ThreadStatus};
use uuid::Uuid;

use super::ladder::{Glyphs, Ladder, Positions};
use super::{ServerArgs, listing_id, parse_party, refusal};

/// The buyer's strategies (see `haggle_domain::strategy::buyer` and `model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BuyerStrategy {
    /// Opens at 3/4 of the budget, 1/20 of it more a round, 3 offers (CPM: 15.00 to 20.00).
    Conservative,
    /// Opens at 2/3 of the budget, 1/15 of it more a round, 5 offers (CPM: 20.00 to 30.00).
    Balanced,
    /// Opens at 3/7 of the budget, 1/7 of it more a round, 10 offers (CPM: 15.00 to 35.00).
    Aggressive,
    /// The balanced budget, stepping by how much the seller moved last.
    Adaptive,
    /// The balanced budget, capped by --elsewhere, a standing offer held on another listing.
    Competitive,
    /// Opponent modelling (the default): opens at 35% of the ask, models the seller's floor
    /// from its moves, and concedes late toward the price of most expected surplus, never above
    /// the budget.
    Bayes,
}

impl BuyerStrategy {
    /// The strategy's name, as `--strategy` takes it.
    fn name(self) -> &'static str {
        match self {
            BuyerStrategy::Conservative => "conservative",
            BuyerStrategy::Balanced => "balanced",
            BuyerStrategy::Aggressive => "aggressive",
            BuyerStrategy::Adaptive => "adaptive",
            BuyerStrategy::Competitive => "competitive",
            BuyerStrategy::Bayes => "bayes",
        }
    }
}

/// `haggle negotiate` options. How the buyer bargains by default, and why, is `--help`'s to say
/// (`NEGOTIATE_HELP`), as the struct's own documentation does not reach it.
#[derive(Debug, clap::Args)]
#[command(after_long_help = NEGOTIATE_HELP)]
pub struct NegotiateArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The listing to negotiate on.
    #[arg(long, value_name = "LISTING_ID", value_parser = listing_id)]
    pub listing: Uuid,
    /// Which side I am: `buyer` bids on the listing, `seller` answers the bids on my listing.
    #[arg(long = "as", default_value = "buyer", value_parser = parse_party)]
    pub side: Party,
    #[command(flatten)]
    pub buyer: BuyerArgs,
    /// As seller: the lowest price I take, in minor units. Never crossed.
    #[arg(long)]
    pub floor: Option<i64>,
    /// As seller: how I counter, as a policy's `counter` (JSON), e.g. '{"strategy":"step","fraction":0.25}'.
    #[arg(long, default_value = r#"{"strategy":"split"}"#, value_parser = parse_counter)]
    pub counter: Strategy,
    /// Seconds each wait for the other side may last (the server allows up to 60).
    #[arg(long, default_value_t = 30.0)]
    pub wait: f64,
    /// Give up (leaving the negotiation as it stands) after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Draw the ladder in plain ASCII (the default when standard output is not a terminal).
    #[arg(long)]
    pub ascii: bool,
}

/// How the buyer bargains: its strategy and budget (`haggle negotiate` and `haggle a2a`).
#[derive(Debug, clap::Args)]
pub struct BuyerArgs {
    /// The buyer's strategy.
    #[arg(long, value_enum, default_value_t = BuyerStrategy::Bayes)]
    pub strategy: BuyerStrategy,
    /// The most the buyer will pay, in minor units (a guide profile is scaled to it). Defaults
    /// to the listing's ask, which bayes bargains down from; give the guide's profiles less.
    #[arg(long, conflicts_with = "cpm")]
    pub budget: Option<i64>,
    /// Use the guide's absolute CPM profiles (balanced: 20.00 to 30.00) instead of scaling them
    /// to the budget.
    #[arg(long)]
    pub cpm: bool,
    /// Multiplies the CPM profile's target, max and step (implies --cpm).
    #[arg(long, conflicts_with = "budget")]
    pub scale: Option<f64>,
    /// With --strategy competitive: a standing offer held elsewhere, in minor units; the buyer
    /// never offers or accepts more here.
    #[arg(long)]
    pub elsewhere: Option<i64>,
    /// The buyer's opening bid, in minor units (overrides the profile's).
    #[arg(long)]
    pub target: Option<i64>,
    /// The most the buyer pays, in minor units (overrides the profile's).
    #[arg(long)]
    pub max: Option<i64>,
    /// How much each buyer offer adds, in minor units (overrides the profile's).
    #[arg(long)]
    pub step: Option<i64>,
    /// How many offers the buyer makes before walking away (overrides the profile's).
    #[arg(long)]
    pub rounds: Option<i32>,
}

const NEGOTIATE_HELP: &str = "\
As buyer, by default: --strategy bayes, paying at most --budget, which is by default the
listing's ask, since buying at the ask takes no negotiation. bayes opens at 35% of the ask,
learns the seller's floor from the seller's counters, and bargains toward it rather than toward
the budget; of the buyer strategies it earns the most in the simulator's tournament
(STRATEGIES.md). It concedes toward the budget, though, so a --budget of what the listing is
worth to you, below the ask, makes it hold out for less.

The ad-buyer guide's profiles (conservative, balanced, aggressive; adaptive and competitive
start from balanced's) open at --target, add --step an offer for --rounds offers, and take any
price up to --max. They are scaled to the budget in the guide's proportions (balanced opens at
2/3 of it and pays up to all of it), so with the ask as the budget they take the seller's first
counter below it: give them a budget below the ask. With --cpm they are the guide's absolute CPM
figures (balanced: 20.00 to 30.00), which --scale multiplies (--scale 46 makes balanced 920.00
to 1,380.00); --target, --max and --step set the amounts outright. Amounts given are minor units
(35000 is 350.00); amounts printed are major units with the currency.

Exit status:
  0  the negotiation ended (accepted, rejected, expired or closed), or my own strategy stopped
     (it walked away, or ran out of rounds), or the listing was sold or withdrawn
  1  an error, or the other side did not answer before --timeout (the negotiation is left as
     it stands)";

/// The flag of `haggle negotiate` that sets a field of the buyer's budget.
fn budget_flag(field: &str) -> &str {
    match field {
        "target" => "--target",
        "max" => "--max",
        "step" => "--step",
        "max_rounds" => "--rounds",
        other => other,
    }
}

fn parse_counter(text: &str) -> Result<Strategy, String> {
    serde_json::from_str(text).map_err(|error| format!("not a counter strategy: {error}"))
}

pub async fn negotiate(args: NegotiateArgs) -> anyhow::Result<()> {
    let client = args.server.keyed_client("negotiate")?;
    if !(args.wait > 0.0 && args.wait <= 60.0) {
        bail!("--wait must be more than 0 and at most 60 seconds");
    }
    let ascii = args.ascii || !std::io::stdout().is_terminal();
    let session = Session {
        client,
        listing: args.listing,
        glyphs: if ascii { Glyphs::ASCII } else { Glyphs::UNICODE },
        wait: args.wait,
        timeout: Duration::from_secs(args.timeout),
        deadline: Instant::now() + Duration::from_secs(args.timeout),
    };
    match args.side {
        Party::Buyer => session.run_buyer(&args).await,
        Party::Seller => {
            let floor = args.floor.context("as seller, give the lowest price you take: --floor <minor units>")?;
            session.run_seller(floor, args.counter).await
        }
    }
}

/// The buyer's strategy with the profile scaled and overridden as asked.
#[derive(Debug, Clone)]
pub(super) enum Buyer {
    /// One of the guide's profiles (which one, for its name).
    Threshold(BuyerStrategy, SimpleThreshold),
    Adaptive(Adaptive),
    Competitive(Competitive),
    Bayes(BayesBuyer),
}

impl Buyer {
    pub(super) fn next(&self, state: &NegotiationState) -> Decision {
        match self {
            Buyer::Threshold(_, strategy) => strategy.next(state),
            Buyer::Adaptive(strategy) => strategy.next(state),
            Buyer::Competitive(strategy) => strategy.next(state),
            Buyer::Bayes(strategy) => haggle_domain::strategy::Negotiator::next(strategy, state),
        }
    }

    /// What the strategy will do, under its own name, with the amounts in `currency`.
    pub(super) fn describe(&self, currency: Currency) -> String {
        let money = |minor| Price::new(minor, currency);
        let (strategy, target, max, step, rounds) = match self {
            Buyer::Threshold(strategy, s) => (*strategy, s.target, s.max, s.step, s.max_rounds),
            Buyer::Adaptive(s) => (BuyerStrategy::Adaptive, s.target, s.max, s.step, s.max_rounds),
            Buyer::Competitive(s) => (BuyerStrategy::Competitive, s.target, s.cap(), s.step, s.max_rounds),
            Buyer::Bayes(s) => {
                return format!(
                    "bayes: open at {:.0}% of the ask, model the seller's floor, pay up to {}",
                    BAYES_OPENING * 100.0,
                    money(s.max)
                );
            }
        };
        format!(
            "{}: open at {}, pay up to {}, step {}, {rounds} offers",
            strategy.name(),
            money(target),
            money(max),
            money(step)
        )
    }
}

/// The buyer's strategy for a listing asking `ask`: the profile scaled to the budget (or the
/// guide's CPM figures), then the explicit amounts.
pub(super) fn budget(args: &BuyerArgs, ask: i64) -> anyhow::Result<Buyer> {
    let profile = match args.strategy {
        BuyerStrategy::Conservative => Profile::Conservative,
        BuyerStrategy::Balanced | BuyerStrategy::Adaptive | BuyerStrategy::Competitive | BuyerStrategy::Bayes => {
            Profile::Balanced
        }
        BuyerStrategy::Aggressive => Profile::Aggressive,
    };
    let base = SimpleThreshold::profile(profile);
    let base = if args.cpm || args.scale.is_some() {
        let scale = args.scale.unwrap_or(1.0);
        if !(scale.is_finite() && scale > 0.0) {
            bail!("--scale must be a positive number");
        }
        let scaled = |amount: i64| (amount as f64 * scale).round() as i64;
        SimpleThreshold { target: scaled(base.target), max: scaled(base.max), step: scaled(base.step), ..base }
    } else {
        let budget = args.budget.unwrap_or(ask);
        if budget < 1 {
            bail!("--budget must be a positive number of minor units");
        }
        scaled_profile(profile, budget)
    };
    let threshold = SimpleThreshold {
        target: args.target.unwrap_or(base.target),
        max: args.max.unwrap_or(base.max),
        step: args.step.unwrap_or(base.step),
        max_rounds: args.rounds.unwrap_or(base.max_rounds),
    };
    if let Err(rejection) = threshold.validate() {
        let problems = match rejection {
            haggle_domain::Rejection::Validation(errors) => errors
                .iter()
                .map(|e| format!("{}: {}", budget_flag(&e.field), e.message))
                .collect::<Vec<_>>()
                .join("; "),
            other => format!("{other:?}"),
        };
        bail!("the buyer's budget is not usable: {problems}");
    }
    Ok(match args.strategy {
        BuyerStrategy::Adaptive => Buyer::Adaptive(threshold.into()),
        BuyerStrategy::Competitive => {
            Buyer::Competitive(Competitive { best_elsewhere: args.elsewhere, ..Competitive::from(threshold) })
        }
        BuyerStrategy::Bayes => Buyer::Bayes(BayesBuyer::new(threshold.max)),
        strategy @ (BuyerStrategy::Conservative | BuyerStrategy::Balanced | BuyerStrategy::Aggressive) => {
            Buyer::Threshold(strategy, threshold)
        }
    })
}

/// The guide's profile with its `max` moved to `budget`, the other amounts in proportion (as the
/// simulator scales a buyer's profile to its value).
fn scaled_profile(profile: Profile, budget: i64) -> SimpleThreshold {
    let base = SimpleThreshold::profile(profile);
    let scale = |amount: i64| ((i128::from(amount) * i128::from(budget)) / i128::from(base.max)) as i64;
    SimpleThreshold { target: scale(base.target).max(1), max: budget, step: scale(base.step).max(1), ..base }
}

struct Session {
    client: Client,
    listing: Uuid,
    glyphs: Glyphs,
    wait: f64,
    timeout: Duration,
    deadline: Instant,
}

/// How a negotiation ended, or why this command stopped following it.
enum Outcome {
    Ended(ThreadWithBids),
    /// This side stopped, by its strategy or because there is nothing left to negotiate.
    Stopped(String),
    /// The other side did not answer before `--timeout`: an error exit.
    TimedOut(String),
}

/// What has been printed of one thread.
struct Shown {
    ladder: Option<Ladder>,
    printed: usize,
}

impl Shown {
    fn new() -> Shown {
        Shown { ladder: None, printed: 0 }
    }

    /// Prints the thread's bids not printed yet. The scale runs from the opening bid to the ask.
    fn print_new(&mut self, thread: &ThreadWithBids, ask: i64, glyphs: Glyphs) {
        let Some(opening) = thread.bids.first() else { return };
        let ladder = *self.ladder.get_or_insert_with(|| Ladder::new(opening.amount..=ask, glyphs));
        for (i, bid) in thread.bids.iter().enumerate().skip(self.printed) {
            println!("{}", ladder.line(bid, Positions::after(&thread.bids[..=i], ask)));
        }
        self.printed = self.printed.max(thread.bids.len());
    }
}

impl Session {
    fn state(&self, thread: &ThreadWithBids, mover: Party, ask: i64, max_rounds: i32) -> NegotiationState {
        NegotiationState {
            mover,
            ask,
            max_rounds,
            // Only the seller tier engine reads the buyer's tier; see run_seller.
            buyer_tier: haggle_domain::Tier::Agency,
            bids: thread.bids.iter().map(|bid| bid.amount).collect(),
            pending_final: thread.bids.last().is_some_and(|bid| bid.is_final),
            auto_moves: u32::try_from(thread.bids.iter().filter(|bid| bid.author == mover).count()).unwrap_or(0),
        }
    }

    fn time_left(&self) -> bool {
        Instant::now() < self.deadline
    }

    async fn run_buyer(&self, args: &NegotiateArgs) -> anyhow::Result<()> {
        let listing = self.client.get_listing(self.listing).await?;
        let buyer = &budget(&args.buyer, listing.ask_amount)?;
        eprintln!(
            "negotiating as buyer on \"{}\" (ask {}), {}",
            listing.title,
            Price::new(listing.ask_amount, listing.currency),
            buyer.describe(listing.currency)
        );
        let live = self
            .client
            .list_threads(&ThreadQuery {
                role: Some(Party::Buyer),
                status: Some(ThreadStatus::Active),
                listing_id: Some(self.listing),
                order_id: None,
                kind: Some(ThreadKind::Price),
                limit: Some(1),
                cursor: None,
            })
            .await?;
        let thread_id = match live.data.first() {
            Some(thread) => {
                eprintln!("resuming my live thread {}", thread.id);
                thread.id
            }
            None => {
                let empty = NegotiationState {
                    mover: Party::Buyer,
                    ask: listing.ask_amount,
                    max_rounds: listing.max_rounds,
                    buyer_tier: haggle_domain::Tier::Agency,
                    bids: Vec::new(),
                    pending_final: false,
                    auto_moves: 0,
                };
                match buyer.next(&empty) {
                    Decision::Counter { amount, .. } => {
                        match self.client.place_bid(self.listing, &Placement::new(amount)).await {
                            Ok(placed) => placed.thread.id,
                            Err(error) => return Err(refusal::explain(&self.client, &listing, error).await),
                        }
                    }
                    Decision::Accept { rationale } | Decision::Reject { rationale } | Decision::Stop { rationale } => {
                        println!("stopped: {}", rationale.describe());
                        return Ok(());
                    }
                }
            }
        };
        let mut shown = Shown::new();
        let mut refusals = 0;
        let outcome = loop {
            let thread = self.client.get_thread(thread_id).await?;
            shown.print_new(&thread, listing.ask_amount, self.glyphs);
            if thread.thread.status != ThreadStatus::Active {
                break Outcome::Ended(thread);
            }
            let pending = thread.thread.last_bid_id;
            match thread.thread.turn {
                Some(Party::Seller) | None => {
                    if !self.time_left() {
                        break Outcome::TimedOut("the seller did not answer".to_owned());
                    }
                    self.client.get_bid(pending, Some(self.wait)).await?;
                }
                Some(Party::Buyer) => {
                    let state = self.state(&thread, Party::Buyer, listing.ask_amount, listing.max_rounds);
                    let decision = buyer.next(&state);
                    match self.act(pending, decision).await {
                        Ok(Some(stop)) => break Outcome::Stopped(stop),
                        Ok(None) => {}
                        Err(error) if refused_by_state(&error) && refusals < 3 => {
                            // The bid changed under us (it expired, or the listing sold): look again.
                            refusals += 1;
                            eprintln!("refused: {error}");
                        }
                        Err(error) => return Err(refusal::explain(&self.client, &listing, error).await),
                    }
                }
            }
        };
        self.print_outcome(outcome, Party::Buyer).await
    }

    /// Makes the move `decision` on the pending bid; `Some(reason)` when the decision is to stop.
    async fn act(&self, pending: Uuid, decision: Decision) -> Result<Option<String>, ClientError> {
        match decision {
            Decision::Accept { .. } => {
                self.client.accept(pending).await?;
            }
            Decision::Counter { amount, is_final } => {
                self.client.counter(pending, &CounterOffer::new(amount, is_final)).await?;
            }
            Decision::Reject { rationale } => {
                self.client.reject(pending).await?;
                eprintln!("rejecting: {}", rationale.describe());
            }
            Decision::Stop { rationale } => return Ok(Some(rationale.describe().to_owned())),
        }
        Ok(None)
    }

    async fn print_outcome(&self, outcome: Outcome, me: Party) -> anyhow::Result<()> {
        match outcome {
            Outcome::Stopped(reason) => println!("stopped: {reason}"),
            Outcome::TimedOut(what) => {
                let waited = self.timeout.as_secs();
                bail!("{what} within --timeout ({waited} s); the negotiation is left as it stands")
            }
            Outcome::Ended(thread) => {
                let last = thread.bids.last().context("a thread has bids")?;
                let reason = thread.thread.closed_reason.map_or("", |reason| reason.as_str());
                match thread.thread.status {
                    ThreadStatus::Accepted => {
                        let orders = self
                            .client
                            .list_orders(&OrderQuery {
                                role: Some(me),
                                listing_id: Some(thread.thread.listing_id),
                                limit: Some(200),
                                cursor: None,
                            })
                            .await?;
                        let order = orders.data.iter().find(|order| order.thread_id == Some(thread.thread.id));
                        let order = order.map(|order| format!(" (order {})", order.id)).unwrap_or_default();
                        println!("ACCEPTED at {}{order}", Price::new(last.amount, last.currency));
                    }
                    ThreadStatus::Rejected => {
                        let by = match reason {
                            "withdrawn" => last.author,
                            _ => last.author.other(),
                        };
                        let who = if by == me { "me" } else { by.as_str() };
                        println!("REJECTED ({reason} by {who}) at round {}", thread.thread.rounds);
                    }
                    ThreadStatus::Expired => println!("EXPIRED at round {}", thread.thread.rounds),
                    ThreadStatus::Closed => println!("CLOSED ({reason})"),
                    ThreadStatus::Active => println!("stopped: the negotiation is still open"),
                }
            }
        }
        Ok(())
    }

    /// Answers the bids on my listing with a policy of my own, run here rather than on the
    /// server: `floor` as its limit and `counter` as its strategy. Ends when the first thread it
    /// took part in ends (or the listing is sold or withdrawn).
    ///
    /// The seller cannot read a buyer's tier, so the tier engine sees every buyer as the
    /// listing's `min_negotiation_tier`, the least it can be.
    async fn run_seller(&self, floor: i64, counter: Strategy) -> anyhow::Result<()> {
        let me = self.client.me().await?;
        let listing = self.client.get_listing(self.listing).await?;
        if listing.seller_id != me.id {
            bail!("listing {} is not mine: only its seller can answer its bids", listing.id);
        }
        let money = |minor| Price::new(minor, listing.currency);
        if floor > listing.ask_amount {
            bail!("--floor ({}) is above the ask ({})", money(floor), money(listing.ask_amount));
        }
        let policy = Policy { max_auto_rounds: MAX_AUTO_ROUNDS, ..Policy::new(floor, counter) };
        eprintln!(
            "answering bids on \"{}\" (ask {}) as seller, floor {}",
            listing.title,
            money(listing.ask_amount),
            money(floor)
        );

        // Skip the history: what is waiting now is found below, and what comes next by events.
        let mut after = 0;
        loop {
            let page = self.client.events(&EventQuery { after, limit: Some(200), wait: None }).await?;
            after = page.next_cursor;
            if !page.has_more {
                break;
            }
        }
        let waiting = self
            .client
            .list_threads(&ThreadQuery {
                role: Some(Party::Seller),
                status: Some(ThreadStatus::Active),
                listing_id: Some(self.listing),
                // The listing's price negotiations: its orders' refunds and cancellations are
                // no price to haggle over.
                order_id: None,
                kind: Some(ThreadKind::Price),
                limit: Some(200),
                cursor: None,
            })
            .await?;
        let mut todo: Vec<Uuid> = waiting.data.iter().map(|thread| thread.id).collect();
        let mut shown: HashMap<Uuid, Shown> = HashMap::new();
        let state_of = |thread: &ThreadWithBids| {
            let state = self.state(thread, Party::Seller, listing.ask_amount, listing.max_rounds);
            NegotiationState { buyer_tier: listing.min_negotiation_tier, ..state }
        };
        let outcome = 'watch: loop {
            for thread_id in std::mem::take(&mut todo) {
                let mut refusals = 0;
                loop {
                    let thread = self.client.get_thread(thread_id).await?;
                    let seen = shown.len();
                    let view = shown.entry(thread_id).or_insert_with(Shown::new);
                    if view.printed == 0 && seen > 0 {
                        println!("thread {thread_id}");
                    }
                    view.print_new(&thread, listing.ask_amount, self.glyphs);
                    if thread.thread.status != ThreadStatus::Active {
                        break 'watch Outcome::Ended(thread);
                    }
                    if thread.thread.turn != Some(Party::Seller) {
                        break;
                    }
                    let decision = decide(&policy, &state_of(&thread));
                    match self.act(thread.thread.last_bid_id, decision).await {
                        Ok(Some(stop)) => break 'watch Outcome::Stopped(stop),
                        Ok(None) => {}
                        Err(error) if refused_by_state(&error) && refusals < 3 => {
                            refusals += 1;
                            eprintln!("refused: {error}");
                        }
                        Err(error) => return Err(refusal::explain(&self.client, &listing, error).await),
                    }
                }
            }
            if !self.time_left() {
                break Outcome::TimedOut("no buyer finished a negotiation".to_owned());
            }
            let page = self.client.events(&EventQuery { after, limit: Some(100), wait: Some(self.wait) }).await?;
            after = page.next_cursor;
            let mut touched = BTreeMap::new();
            for event in page.data.iter().filter(|event| event.listing_id == Some(self.listing)) {
                match event.kind {
                    EventType::ListingSold if shown.is_empty() => {
                        break 'watch Outcome::Stopped("the listing is sold".to_owned());
                    }
                    EventType::ListingWithdrawn if shown.is_empty() => {
                        break 'watch Outcome::Stopped("the listing is withdrawn".to_owned());
                    }
                    _ => {}
                }
                if let Some(thread) = event.thread_id {
                    touched.insert(event.id, thread);
                }
            }
            for thread in touched.into_values() {
                if !todo.contains(&thread) {
                    todo.push(thread);
                }
            }
        };
        self.print_outcome(outcome, Party::Seller).await
    }
}

/// A refusal that says the negotiation moved on without us, rather than a mistake of ours.
fn refused_by_state(error: &ClientError) -> bool {
    error.code().is_some_and(moved_on)
}

/// Whether a refusal's code says the negotiation moved on without us.
pub(super) fn moved_on(code: &str) -> bool {
    matches!(code, "invalid_transition" | "bid_expired" | "final_offer" | "not_your_turn")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_scales_and_gives_way_to_explicit_amounts() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: NegotiateArgs,
        }
        let parse = |extra: &[&str]| {
            let listing = Uuid::nil().to_string();
            let mut argv = vec!["haggle", "--listing", &listing, "--api-key", "hk_x"];
            argv.extend_from_slice(extra);
            budget(&Cli::parse_from(argv).args.buyer, 35_000).unwrap()
        };
        let threshold = |buyer: Buyer| match buyer {
            Buyer::Threshold(_, s) => s,
            other => panic!("not a threshold: {other:?}"),
        };
        // By default, bayes up to the ask (350.00).
        assert!(matches!(parse(&[]), Buyer::Bayes(BayesBuyer { max: 35_000, .. })));
        assert_eq!(
            parse(&[]).describe(Currency::USD),
            "bayes: open at 35% of the ask, model the seller's floor, pay up to 350.00 USD"
        );
        // A profile is scaled to the ask: balanced opens at 2/3 of it, and says so by its name.
        let balanced = parse(&["--strategy", "balanced"]);
        assert_eq!(
            balanced.describe(Currency::USD),
            "balanced: open at 233.33 USD, pay up to 350.00 USD, step 23.33 USD, 5 offers"
        );
        let lamp = threshold(balanced);
        assert_eq!((lamp.target, lamp.max, lamp.step, lamp.max_rounds), (23_333, 35_000, 2_333, 5));
        let own = threshold(parse(&["--strategy", "conservative", "--budget", "30000"]));
        assert_eq!((own.target, own.max, own.step, own.max_rounds), (22_500, 30_000, 1_500, 3));
        // The guide's CPM figures on request.
        let cpm = parse(&["--cpm", "--strategy", "balanced"]);
        assert_eq!(threshold(cpm), SimpleThreshold::profile(Profile::Balanced));
        let scaled = threshold(parse(&["--scale", "46", "--strategy", "balanced"]));
        assert_eq!((scaled.target, scaled.max, scaled.step, scaled.max_rounds), (92_000, 138_000, 9_200, 5));
        let set = threshold(parse(&["--cpm", "--strategy", "aggressive", "--target", "100000", "--max", "130000"]));
        assert_eq!((set.target, set.max, set.step, set.max_rounds), (100_000, 130_000, 500, 10));
        assert!(matches!(parse(&["--strategy", "adaptive"]), Buyer::Adaptive(_)));
        assert!(matches!(parse(&["--budget", "32000"]), Buyer::Bayes(BayesBuyer { max: 32_000, .. })));
        assert!(parse(&["--strategy", "aggressive"]).describe(Currency::USD).starts_with("aggressive: "));
        let Buyer::Competitive(competitive) = parse(&["--strategy", "competitive", "--elsewhere", "30000"]) else {
            panic!("not competitive");
        };
        assert_eq!((competitive.cap(), competitive.target), (30_000, 23_333));

        let listing = Uuid::nil().to_string();
        let refused = |extra: &[&str]| {
            let argv = ["haggle", "--listing", &listing, "--api-key", "hk_x"].into_iter().chain(extra.iter().copied());
            budget(&Cli::parse_from(argv).args.buyer, 35_000).unwrap_err().to_string()
        };
        let error = refused(&["--rounds", "0"]);
        assert!(error.contains("--rounds: must be between 1 and") && !error.contains("max_rounds"), "{error}");
        let error = refused(&["--target", "5000", "--max", "4000"]);
        assert!(error.contains("--max: must be at least the target"), "{error}");
    }
}
