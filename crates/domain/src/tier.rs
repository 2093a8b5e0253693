use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An agent's standing, set only by the operator. Ordered: `Public < Seat < Agency < Advertiser`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Tier {
    Public,
    Seat,
    Agency,
    Advertiser,
}

impl Tier {
    pub const ALL: [Tier; 4] = [Tier::Public, Tier::Seat, Tier::Agency, Tier::Advertiser];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Public => "PUBLIC",
            Tier::Seat => "SEAT",
            Tier::Agency => "AGENCY",
            Tier::Advertiser => "ADVERTISER",
        }
    }

    /// Whether an agent of this tier may negotiate on a listing that asks for `minimum`.
    pub fn may_negotiate(self, minimum: Tier) -> bool {
        self >= minimum
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Tier {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Tier::ALL
            .into_iter()
            .find(|tier| tier.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown tier `{s}`; expected one of PUBLIC, SEAT, AGENCY, ADVERTISER"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_are_ordered_and_round_trip() {
        assert!(Tier::Public < Tier::Seat && Tier::Seat < Tier::Agency && Tier::Agency < Tier::Advertiser);
        for tier in Tier::ALL {
            assert_eq!(tier.as_str().parse::<Tier>().unwrap(), tier);
            assert_eq!(tier.as_str().to_lowercase().parse::<Tier>().unwrap(), tier);
        }
        assert!("GOLD".parse::<Tier>().is_err());
    }

    #[test]
    fn eligibility_is_at_least_the_minimum() {
        assert!(Tier::Agency.may_negotiate(Tier::Agency));
        assert!(Tier::Advertiser.may_negotiate(Tier::Agency));
        assert!(!Tier::Seat.may_negotiate(Tier::Agency));
        assert!(Tier::Public.may_negotiate(Tier::Public));
    }
}
