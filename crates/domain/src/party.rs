//! The two sides of a negotiation.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The two sides of a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Party {
    Buyer,
    Seller,
}

impl Party {
    pub fn other(self) -> Party {
        match self {
            Party::Buyer => Party::Seller,
            Party::Seller => Party::Buyer,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Party::Buyer => "buyer",
            Party::Seller => "seller",
        }
    }

    /// Who authors the bid of a round: the buyer opens, then the sides alternate.
    pub fn author_of_round(round: i32) -> Party {
        if round % 2 == 1 { Party::Buyer } else { Party::Seller }
    }
}

impl FromStr for Party {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "buyer" => Ok(Party::Buyer),
            "seller" => Ok(Party::Seller),
            other => Err(format!("unknown party `{other}`; expected buyer or seller")),
        }
    }
}
