//! Who is in the market: the strategies a buyer or a seller can play, and the mix of them.
//!
//! Every agent has a private reservation price: a buyer's value (the most it will pay) or a
//! seller's cost (the least it will take). Strategies are the domain's own, scaled to that price:
//!
//! - Buyers `conservative`, `balanced`, `aggressive`: [`SimpleThreshold`] with the guide's profile,
//!   scaled so that `max` is the buyer's value (target, step and rounds keep the profile's shape).
//!   `adaptive`: [`Adaptive`] on the balanced profile.
//! - Either side `split`, `step` (a quarter of the gap), `time-boulware` (e = 0.2),
//!   `time-linear` (e = 1), `time-conceder` (e = 3), `tft` (tit for tat, kindness 0): a [`Policy`]
//!   whose limit is the reservation price. A policy buyer opens at half its value.
//! - Sellers `tier`: the seller tier engine, answering buyers of `--tier`.
//! - Either side `bayes`: Haggle's opponent-modelling strategy (the domain's `model`), with the
//!   reservation price as its limit; the buyer opens at 35 % of the ask.
//! - Sellers `closer`: Haggle's seller for negotiations decided at the deadline (the domain's
//!   `closer`), with the seller's cost as its floor.
//! - Buyers `competitive`: [`Competitive`] on the balanced profile; every negotiation of the
//!   market is on its own, so it has no counter elsewhere to use as leverage.
//! - Either side `q`: the tabular Q-learner trained by `--learn q`.

use std::fmt;

use haggle_domain::bid::{self, Party};
use haggle_domain::strategy::model::{BayesBuyer, DEFAULT_BAYES_E};
use haggle_domain::strategy::{
    Adaptive, Competitive, Decision, MAX_AUTO_ROUNDS, NegotiationState, Negotiator, Policy, Profile, SimpleThreshold,
    Strategy, decide,
};

use super::qtable::{QPlayer, QTable};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Threshold(ProfileKey),
    Adaptive,
    Split,
    Step,
    TimeBoulware,
    TimeLinear,
    TimeConceder,
    TitForTat,
    Tier,
    Learned,
    Bayes,
    Closer,
    Competitive,
}

/// [`Profile`] with an order, for sorting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProfileKey {
    Conservative,
    Balanced,
    Aggressive,
}

impl ProfileKey {
    fn profile(self) -> Profile {
        match self {
            ProfileKey::Conservative => Profile::Conservative,
            ProfileKey::Balanced => Profile::Balanced,
            ProfileKey::Aggressive => Profile::Aggressive,
        }
    }
}

impl Kind {
    pub const BUYERS: [Kind; 12] = [
        Kind::Threshold(ProfileKey::Conservative),
        Kind::Threshold(ProfileKey::Balanced),
        Kind::Threshold(ProfileKey::Aggressive),
        Kind::Adaptive,
        Kind::Split,
        Kind::Step,
        Kind::TimeBoulware,
        Kind::TimeLinear,
        Kind::TimeConceder,
        Kind::TitForTat,
        Kind::Bayes,
        Kind::Competitive,
    ];
    pub const SELLERS: [Kind; 9] = [
        Kind::Tier,
        Kind::Split,
        Kind::Step,
        Kind::TimeBoulware,
        Kind::TimeLinear,
        Kind::TimeConceder,
        Kind::TitForTat,
        Kind::Bayes,
        Kind::Closer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Threshold(ProfileKey::Conservative) => "conservative",
            Kind::Threshold(ProfileKey::Balanced) => "balanced",
            Kind::Threshold(ProfileKey::Aggressive) => "aggressive",
            Kind::Adaptive => "adaptive",
            Kind::Split => "split",
            Kind::Step => "step",
            Kind::TimeBoulware => "time-boulware",
            Kind::TimeLinear => "time-linear",
            Kind::TimeConceder => "time-conceder",
            Kind::TitForTat => "tft",
            Kind::Tier => "tier",
            Kind::Learned => "q",
            Kind::Bayes => "bayes",
            Kind::Closer => "closer",
            Kind::Competitive => "competitive",
        }
    }

    pub fn parse(side: Party, name: &str) -> Result<Kind, String> {
        let known: &[Kind] = match side {
            Party::Buyer => &Kind::BUYERS,
            Party::Seller => &Kind::SELLERS,
        };
        if name.eq_ignore_ascii_case("q") {
            return Ok(Kind::Learned);
        }
        known.iter().copied().find(|kind| kind.name().eq_ignore_ascii_case(name)).ok_or_else(|| {
            let names: Vec<&str> = known.iter().map(|kind| kind.name()).collect();
            format!("unknown {} strategy `{name}`; expected one of {}, q", side.as_str(), names.join(", "))
        })
    }

    /// The counter strategy of a policy-based agent.
    fn counter(self) -> Option<Strategy> {
        match self {
            Kind::Split => Some(Strategy::Split {}),
            Kind::Step => Some(Strategy::Step { amount: None, fraction: Some(0.25) }),
            Kind::TimeBoulware => Some(Strategy::Time { k: 0.0, e: 0.2, start: None }),
            Kind::TimeLinear => Some(Strategy::Time { k: 0.0, e: 1.0, start: None }),
            Kind::TimeConceder => Some(Strategy::Time { k: 0.0, e: 3.0, start: None }),
            Kind::TitForTat => Some(Strategy::TitForTat { kindness: 0.0 }),
            Kind::Tier => Some(Strategy::Tier {}),
            Kind::Closer => Some(Strategy::Closer {}),
            Kind::Threshold(_) | Kind::Adaptive | Kind::Learned | Kind::Bayes | Kind::Competitive => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How many agents play each strategy on one side: `balanced:10,adaptive:10,aggressive:5`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mix(pub Vec<(Kind, usize)>);

impl Mix {
    pub fn parse(side: Party, text: &str) -> Result<Mix, String> {
        let mut groups: Vec<(Kind, usize)> = Vec::new();
        for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let (name, count) = match item.split_once(':') {
                Some((name, count)) => {
                    let count =
                        count.trim().parse::<usize>().map_err(|_| format!("`{item}`: the count must be a number"))?;
                    (name.trim(), count)
                }
                None => (item, 1),
            };
            let kind = Kind::parse(side, name)?;
            if count == 0 {
                continue;
            }
            match groups.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += count,
                None => groups.push((kind, count)),
            }
        }
        if groups.is_empty() {
            return Err(format!("no {}s: give at least one strategy with a count", side.as_str()));
        }
        Ok(Mix(groups))
    }

    pub fn total(&self) -> usize {
        self.0.iter().map(|(_, n)| n).sum()
    }

    pub fn kinds(&self) -> Vec<Kind> {
        self.0.iter().map(|(kind, _)| *kind).collect()
    }

    pub fn contains(&self, kind: Kind) -> bool {
        self.0.iter().any(|(k, _)| *k == kind)
    }

    /// The strategy of each agent in order: the groups one after the other.
    pub fn agents(&self) -> Vec<Kind> {
        self.0.iter().flat_map(|&(kind, n)| std::iter::repeat_n(kind, n)).collect()
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(kind, n)| format!("{kind}:{n}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// A policy-based buyer: the domain's [`decide`], plus the opening bid a policy does not make.
struct PolicyBuyer {
    policy: Policy,
    opening: i64,
}

impl Negotiator for PolicyBuyer {
    fn next(&self, state: &NegotiationState) -> Decision {
        if state.mover == Party::Buyer && state.bids.is_empty() {
            let amount = self.opening.min(state.ask).max(1);
            return Decision::Counter { amount, is_final: bid::is_final(1, state.max_rounds, false) };
        }
        decide(&self.policy, state)
    }
}

/// The trained tables the `q` agents play with.
#[derive(Debug, Clone, Copy)]
pub struct Tables<'a> {
    pub buyer: Option<&'a QTable>,
    pub seller: Option<&'a QTable>,
}

/// The negotiator for an agent of `kind` on `side` with reservation price `limit`.
pub fn negotiator<'a>(side: Party, kind: Kind, limit: i64, tables: Tables<'a>) -> Box<dyn Negotiator + 'a> {
    if let Some(counter) = kind.counter() {
        let policy = Policy { max_auto_rounds: MAX_AUTO_ROUNDS, ..Policy::new(limit, counter) };
        return match side {
            Party::Seller => Box::new(policy),
            Party::Buyer => Box::new(PolicyBuyer { policy, opening: (limit / 2).max(1) }),
        };
    }
    match kind {
        Kind::Threshold(profile) => Box::new(scaled(profile.profile(), limit)),
        Kind::Adaptive => Box::new(Adaptive::from(scaled(Profile::Balanced, limit))),
        // Each negotiation of the market is on its own, so a competitive buyer has no standing
        // counter elsewhere to use as leverage: it plays its balanced budget.
        Kind::Competitive => Box::new(Competitive::from(scaled(Profile::Balanced, limit))),
        Kind::Bayes => match side {
            Party::Buyer => Box::new(BayesBuyer::new(limit)),
            Party::Seller => Box::new(Policy {
                max_auto_rounds: MAX_AUTO_ROUNDS,
                ..Policy::new(limit, Strategy::Bayes { e: DEFAULT_BAYES_E })
            }),
        },
        Kind::Learned => {
            let table = match side {
                Party::Buyer => tables.buyer,
                Party::Seller => tables.seller,
            };
            match table {
                Some(table) => Box::new(QPlayer::greedy(table, side, limit)),
                None => Box::new(Walkaway),
            }
        }
        Kind::Split
        | Kind::Step
        | Kind::TimeBoulware
        | Kind::TimeLinear
        | Kind::TimeConceder
        | Kind::TitForTat
        | Kind::Closer
        | Kind::Tier => unreachable!("policy kinds are handled above"),
    }
}

/// The guide's profile with its `max` moved to `value`, the other amounts in proportion.
pub fn scaled(profile: Profile, value: i64) -> SimpleThreshold {
    let base = SimpleThreshold::profile(profile);
    let scale = |amount: i64| ((i128::from(amount) * i128::from(value)) / i128::from(base.max)) as i64;
    SimpleThreshold {
        target: scale(base.target).max(1),
        max: value,
        step: scale(base.step).max(1),
        max_rounds: base.max_rounds,
    }
}

/// A `q` agent without a table (never reached: `q` requires `--learn q`) does not trade.
struct Walkaway;

impl Negotiator for Walkaway {
    fn next(&self, _state: &NegotiationState) -> Decision {
        Decision::Stop { rationale: haggle_domain::strategy::Rationale::NothingToAnswer }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse_and_merge() {
        let mix = Mix::parse(Party::Buyer, "balanced:10, adaptive:10,aggressive:5,balanced:2,split").unwrap();
        assert_eq!(
            mix.0,
            vec![
                (Kind::Threshold(ProfileKey::Balanced), 12),
                (Kind::Adaptive, 10),
                (Kind::Threshold(ProfileKey::Aggressive), 5),
                (Kind::Split, 1)
            ]
        );
        assert_eq!(mix.total(), 28);
        assert_eq!(mix.to_string(), "balanced:12,adaptive:10,aggressive:5,split:1");
        assert!(Mix::parse(Party::Buyer, "tier:3").is_err(), "the tier engine is a seller's");
        assert!(Mix::parse(Party::Seller, "balanced:3").is_err());
        assert!(Mix::parse(Party::Seller, "split:x").is_err());
        assert!(Mix::parse(Party::Seller, "split:0").is_err());
        assert_eq!(Mix::parse(Party::Seller, "TIER:2,q:1").unwrap().0, vec![(Kind::Tier, 2), (Kind::Learned, 1)]);
    }

    #[test]
    fn profiles_scale_to_the_value() {
        // Balanced is (20, 30, 2, 5) in currency units: at a value of 9000 it is (6000, 9000, 600, 5).
        let s = scaled(Profile::Balanced, 9_000);
        assert_eq!(s, SimpleThreshold { target: 6_000, max: 9_000, step: 600, max_rounds: 5 });
        assert!(s.validate().is_ok());
    }
}
