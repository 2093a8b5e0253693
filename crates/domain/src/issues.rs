//! Issues beside price: what a listing lets its buyers negotiate (quantity, delivery days, a
//! warranty...), how a bid's `terms` are checked against them, and how a party values an offer
//! over price and issues together (an additive utility).
//!
//! Money stays in the bid's amount: an issue is a whole-number range or an ordered list of
//! named values, and one side prefers its higher end, the other side its lower end. An offer is
//! an amount with one value per issue (for a list, the index of the value), in the listing's
//! order of issues.

use std::collections::{BTreeMap, HashSet};
use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::party::Party;
use super::rejection::{FieldError, Rejection, Validator};

/// The most issues a listing may declare.
pub const MAX_ISSUES: usize = 8;
/// The most values a list issue may name.
pub const MAX_ENUM_VALUES: usize = 20;
/// Longest issue name, and longest value of a list issue, in characters.
pub const MAX_NAME_CHARS: usize = 40;
/// Bounds of an integer issue's range.
pub const MAX_ISSUE_VALUE: i64 = 1_000_000_000;
/// The name a utility's weights give to the price.
pub const PRICE: &str = "price";

/// Which end of an issue's scale the buyer prefers; the seller prefers the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Higher,
    Lower,
}

/// The type of an issue's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum IssueType {
    /// A whole number from `min` to `max`, inclusive.
    Integer,
    /// One of `values`, listed from the low end of the scale to the high end.
    Enum,
}

/// One negotiable issue of a listing, e.g. `{"name": "delivery_days", "type": "integer",
/// "min": 1, "max": 30, "buyer_prefers": "lower"}` or `{"name": "warranty", "type": "enum",
/// "values": ["none", "1y", "2y"], "buyer_prefers": "higher"}`. [`Issues::validate`] checks
/// that each type has its fields (`min` and `max`, or `values`) and no other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Issue {
    /// Lower-case letters, digits and underscores, starting with a letter; not `price`.
    pub name: String,
    #[serde(rename = "type")]
    pub kind: IssueType,
    #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
    pub min: Option<i64>,
    #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
    pub max: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
    /// The end of the scale the buyer prefers; the seller prefers the other.
    pub buyer_prefers: Direction,
}

impl Issue {
    /// How many points the scale has, less one: the span values are normalised over.
    fn span(&self) -> i64 {
        match self.kind {
            IssueType::Integer => (self.max.unwrap_or(0) - self.low()).max(0),
            IssueType::Enum => (self.values.as_ref().map_or(0, Vec::len) as i64 - 1).max(0),
        }
    }

    /// The lowest value (an index for a list).
    pub fn low(&self) -> i64 {
        match self.kind {
            IssueType::Integer => self.min.unwrap_or(0),
            IssueType::Enum => 0,
        }
    }

    fn names(&self) -> &[String] {
        self.values.as_deref().unwrap_or_default()
    }

    /// The highest value (an index for a list).
    pub fn high(&self) -> i64 {
        self.low() + self.span()
    }

    /// Where `value` lies on the scale, from 0 at the low end to 1 at the high end.
    pub fn position(&self, value: i64) -> f64 {
        let span = self.span();
        if span <= 0 { 0.0 } else { ((value - self.low()) as f64 / span as f64).clamp(0.0, 1.0) }
    }

    /// How much `party` likes `value`, from 0 (its worst end) to 1 (its best end).
    pub fn value_for(&self, party: Party, value: i64) -> f64 {
        let position = self.position(value);
        let prefers_higher = match (party, self.buyer_prefers) {
            (Party::Buyer, Direction::Higher) | (Party::Seller, Direction::Lower) => true,
            (Party::Buyer, Direction::Lower) | (Party::Seller, Direction::Higher) => false,
        };
        if prefers_higher { position } else { 1.0 - position }
    }

    /// The end of the scale `party` prefers.
    pub fn best_for(&self, party: Party) -> i64 {
        if self.value_for(party, self.high()) >= self.value_for(party, self.low()) { self.high() } else { self.low() }
    }

    /// The stored JSON of `value`: the number, or the list's value at that index.
    pub fn json(&self, value: i64) -> Value {
        match self.kind {
            IssueType::Integer => Value::from(value),
            IssueType::Enum => usize::try_from(value)
                .ok()
                .and_then(|i| self.names().get(i))
                .map_or(Value::Null, |v| Value::from(v.clone())),
        }
    }

    /// The value of a bid's JSON for this issue, or why it is not one.
    fn read(&self, json: &Value) -> Result<i64, String> {
        match self.kind {
            IssueType::Integer => {
                let (min, max) = (self.low(), self.high());
                let number = json
                    .as_i64()
                    .or_else(|| json.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e15).map(|f| f as i64))
                    .ok_or_else(|| "must be a whole number".to_string())?;
                if (min..=max).contains(&number) { Ok(number) } else { Err(format!("must be between {min} and {max}")) }
            }
            IssueType::Enum => {
                let values = self.names();
                let text = json.as_str().ok_or_else(|| format!("must be one of {}", values.join(", ")))?;
                values
                    .iter()
                    .position(|v| v == text)
                    .map(|i| i as i64)
                    .ok_or_else(|| format!("must be one of {}", values.join(", ")))
            }
        }
    }
}

/// Checks a name of an issue (or of a weight).
pub fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !well_formed || name.len() > MAX_NAME_CHARS {
        return Err(format!(
            "must be 1 to {MAX_NAME_CHARS} lower-case letters, digits or underscores, starting with a letter"
        ));
    }
    Ok(())
}

/// A listing's issues, checked: at most [`MAX_ISSUES`], names unique and not `price`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct Issues(pub Vec<Issue>);

/// An offer over price and issues: the amount and, per issue of the listing in order, its value
/// (an index for a list issue).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Offer {
    pub amount: i64,
    pub values: Vec<i64>,
}

impl Issues {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Issue> {
        self.0.iter()
    }

    /// Checks the issues a seller declares, naming each mistake as `issues[i].field`.
    pub fn validate(&self) -> Result<(), Rejection> {
        let mut v = Validator::new();
        self.check(&mut v);
        v.finish()
    }

    /// Records the mistakes of the declared issues in `v`.
    pub fn check(&self, v: &mut Validator) {
        if self.0.len() > MAX_ISSUES {
            v.fail("issues", format!("a listing declares at most {MAX_ISSUES} issues"));
            return;
        }
        let mut seen = HashSet::new();
        for (i, issue) in self.0.iter().enumerate() {
            let field = |name: &str| format!("issues[{i}].{name}");
            match check_name(&issue.name) {
                Err(message) => v.fail(&field("name"), message),
                Ok(()) if issue.name == PRICE => v.fail(&field("name"), "`price` is the bid's amount, not an issue"),
                Ok(()) if !seen.insert(issue.name.as_str()) => v.fail(&field("name"), "names an issue twice"),
                Ok(()) => {}
            }
            let range = -MAX_ISSUE_VALUE..=MAX_ISSUE_VALUE;
            let bounds = format!("must be a whole number between {} and {MAX_ISSUE_VALUE}", -MAX_ISSUE_VALUE);
            match (issue.kind, issue.min, issue.max, &issue.values) {
                (IssueType::Integer, _, _, Some(_)) => v.fail(&field("values"), "only an enum issue lists values"),
                (IssueType::Integer, None, _, None) => v.fail(&field("min"), "an integer issue needs min and max"),
                (IssueType::Integer, _, None, None) => v.fail(&field("max"), "an integer issue needs min and max"),
                (IssueType::Integer, Some(min), Some(max), None) => {
                    if !range.contains(&min) {
                        v.fail(&field("min"), bounds);
                    } else if !range.contains(&max) {
                        v.fail(&field("max"), bounds);
                    } else if min >= max {
                        v.fail(&field("max"), "must be greater than min");
                    }
                }
                (IssueType::Enum, Some(_), _, _) => v.fail(&field("min"), "only an integer issue has min and max"),
                (IssueType::Enum, _, Some(_), _) => v.fail(&field("max"), "only an integer issue has min and max"),
                (IssueType::Enum, None, None, None) => v.fail(&field("values"), "an enum issue lists its values"),
                (IssueType::Enum, None, None, Some(values)) => {
                    let distinct: HashSet<&String> = values.iter().collect();
                    if !(2..=MAX_ENUM_VALUES).contains(&values.len()) {
                        v.fail(&field("values"), format!("must list 2 to {MAX_ENUM_VALUES} values"));
                    } else if distinct.len() != values.len() {
                        v.fail(&field("values"), "must not repeat a value");
                    } else if values.iter().any(|value| value.is_empty() || value.chars().count() > MAX_NAME_CHARS) {
                        v.fail(&field("values"), format!("each value must be 1 to {MAX_NAME_CHARS} characters"));
                    }
                }
            }
        }
    }

    /// The issue called `name` and its index.
    pub fn find(&self, name: &str) -> Option<(usize, &Issue)> {
        self.0.iter().enumerate().find(|(_, issue)| issue.name == name)
    }

    /// Checks a bid's `terms` against the issues: an object with a value for every issue, each
    /// of its issue's type and within its range, and nothing else. Each mistake names its issue
    /// as the field `terms.<name>`. With no issues declared, any terms pass (they are free JSON).
    pub fn read_terms(&self, terms: Option<&Value>) -> Result<Option<Vec<i64>>, Rejection> {
        if self.is_empty() {
            return Ok(None);
        }
        let empty = Map::new();
        let object = match terms {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(object)) => object,
            Some(_) => return Err(Rejection::invalid("terms", "must be an object with a value for each issue")),
        };
        let mut errors = Vec::new();
        for name in object.keys() {
            if self.find(name).is_none() {
                errors.push(FieldError::new(format!("terms.{name}"), "is not an issue of this listing"));
            }
        }
        let mut values = Vec::with_capacity(self.0.len());
        for issue in &self.0 {
            match object.get(&issue.name).map(|json| issue.read(json)) {
                None => errors.push(FieldError::new(format!("terms.{}", issue.name), "is required by the listing")),
                Some(Err(message)) => errors.push(FieldError::new(format!("terms.{}", issue.name), message)),
                Some(Ok(value)) => values.push(value),
            }
        }
        if errors.is_empty() { Ok(Some(values)) } else { Err(Rejection::Validation(errors)) }
    }

    /// The `terms` JSON of issue values.
    pub fn terms(&self, values: &[i64]) -> Value {
        Value::Object(
            self.0.iter().zip(values).map(|(issue, &value)| (issue.name.clone(), issue.json(value))).collect(),
        )
    }

    /// An offer of `amount` with the issue values of stored `terms`; `None` if they do not fit
    /// the issues (stored before they changed, say).
    pub fn offer(&self, amount: i64, terms: Option<&Value>) -> Option<Offer> {
        let values = self.read_terms(terms).ok()?.unwrap_or_default();
        Some(Offer { amount, values })
    }

    /// The middle of each issue's scale, rounded down.
    pub fn midpoint(&self) -> Vec<i64> {
        self.0.iter().map(|issue| issue.low() + issue.span() / 2).collect()
    }
}

/// A party's additive utility over price and issues, as a policy declares it:
/// `{"weights": {"price": 0.6, "delivery_days": 0.4}, "reservation": 0.5}`.
///
/// Each weight says how much its dimension counts (weights are normalised to sum to 1; one left
/// out counts nothing). The price's value runs from 0 at the policy's `limit` to 1 at
/// `best_price` (by default the ask for a seller, half the limit for a buyer); an issue's from 0
/// at the party's worse end of its scale to 1 at its better end. An offer worth less than
/// `reservation` (0 to 1) is never accepted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Utility {
    pub weights: BTreeMap<String, f64>,
    pub reservation: f64,
    #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
    pub best_price: Option<i64>,
}

impl Utility {
    /// Records the utility's mistakes in `v`, as `utility.<field>`; weights must name `price` or
    /// one of `issues` when the issues are known.
    pub fn check(&self, v: &mut Validator, issues: Option<&Issues>) {
        if self.weights.is_empty() || self.weights.len() > MAX_ISSUES + 1 {
            v.fail("utility.weights", format!("must weigh 1 to {} of price and the issues", MAX_ISSUES + 1));
        }
        let mut total = 0.0;
        for (name, weight) in &self.weights {
            let field = format!("utility.weights.{name}");
            if name != PRICE {
                if let Err(message) = check_name(name) {
                    v.fail(&field, message);
                    continue;
                }
                if issues.is_some_and(|issues| issues.find(name).is_none()) {
                    v.fail(&field, "is neither `price` nor an issue of the listing");
                }
            }
            if !(weight.is_finite() && (0.0..=1000.0).contains(weight)) {
                v.fail(&field, "must be a number from 0 to 1000");
            } else {
                total += weight;
            }
        }
        if !self.weights.is_empty() && total <= 0.0 {
            v.fail("utility.weights", "must not all be 0");
        }
        if !(self.reservation.is_finite() && (0.0..=1.0).contains(&self.reservation)) {
            v.fail("utility.reservation", "must be a number from 0 to 1");
        }
    }

    /// The utility as `party` values offers on a listing of `issues`, with its price limit and
    /// the listing's ask.
    pub fn valuation(&self, party: Party, issues: &Issues, Prices { limit, ask }: Prices) -> Valuation {
        let weight = |name: &str| self.weights.get(name).copied().filter(|w| w.is_finite() && *w > 0.0).unwrap_or(0.0);
        let mut weights: Vec<f64> =
            std::iter::once(weight(PRICE)).chain(issues.iter().map(|i| weight(&i.name))).collect();
        let total: f64 = weights.iter().sum();
        if total > 0.0 {
            weights.iter_mut().for_each(|w| *w /= total);
        } else {
            weights[0] = 1.0;
        }
        let best = self.best_price.unwrap_or(match party {
            Party::Seller => ask,
            Party::Buyer => limit / 2,
        });
        Valuation {
            party,
            issues: issues.clone(),
            weights,
            worst_price: limit,
            best_price: best,
            reservation: if self.reservation.is_finite() { self.reservation.clamp(0.0, 1.0) } else { 1.0 },
        }
    }
}

/// The two prices a side's valuation and opening are reckoned from: its private `limit` (the
/// seller's floor, the buyer's ceiling) and the listing's `ask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prices {
    pub limit: i64,
    pub ask: i64,
}

/// A party's utility made concrete for one listing: what [`Valuation::value`] of an offer is.
#[derive(Debug, Clone, PartialEq)]
pub struct Valuation {
    pub party: Party,
    pub issues: Issues,
    /// Normalised weights, price first, then the issues in order; they sum to 1.
    pub weights: Vec<f64>,
    /// The price worth 0 (the party's private limit) and the price worth 1.
    pub worst_price: i64,
    pub best_price: i64,
    pub reservation: f64,
}

impl Valuation {
    /// How much the party likes `amount`, from 0 to 1.
    pub fn price_value(&self, amount: i64) -> f64 {
        let (worst, best) = (self.worst_price as f64, self.best_price as f64);
        let amount = amount as f64;
        if (best - worst).abs() < f64::EPSILON {
            let better = match self.party {
                Party::Seller => amount >= best,
                Party::Buyer => amount <= best,
            };
            return if better { 1.0 } else { 0.0 };
        }
        ((amount - worst) / (best - worst)).clamp(0.0, 1.0)
    }

    /// The offer's utility, from 0 to 1.
    pub fn value(&self, offer: &Offer) -> f64 {
        let price = self.weights[0] * self.price_value(offer.amount);
        let issues: f64 = self
            .issues
            .iter()
            .zip(&self.weights[1..])
            .zip(&offer.values)
            .map(|((issue, weight), &value)| weight * issue.value_for(self.party, value))
            .sum();
        price + issues
    }

    /// Whether an offer is good enough to agree to: at or above the reservation utility.
    pub fn acceptable(&self, offer: &Offer) -> bool {
        self.value(offer) + 1e-9 >= self.reservation
    }
}

/// The points of the issue space a search looks at: every value of a small scale, and at most
/// `per_issue` evenly spaced values (both ends included) of a larger one, plus any `extra`
/// values (the parties' current positions).
pub fn grid(issues: &Issues, per_issue: usize, extra: &[&[i64]]) -> Vec<Vec<i64>> {
    let mut axes: Vec<Vec<i64>> = Vec::new();
    for (i, issue) in issues.iter().enumerate() {
        let span = issue.span();
        let steps = per_issue.max(2) as i64 - 1;
        let mut axis: Vec<i64> = if span <= steps {
            (issue.low()..=issue.high()).collect()
        } else {
            (0..=steps).map(|k| issue.low() + (span * k + steps / 2) / steps).collect()
        };
        axis.extend(extra.iter().filter_map(|values| values.get(i).copied()));
        axis.sort_unstable();
        axis.dedup();
        axes.push(axis);
    }
    let mut points = vec![Vec::new()];
    for axis in axes {
        points = points
            .into_iter()
            .flat_map(|point| {
                axis.iter().map(move |&value| {
                    let mut next = point.clone();
                    next.push(value);
                    next
                })
            })
            .collect();
    }
    points
}

/// At most `count` amounts evenly spaced over `range`, both ends included.
pub fn price_steps(range: RangeInclusive<i64>, count: usize) -> Vec<i64> {
    let (low, high) = range.into_inner();
    if low > high {
        return Vec::new();
    }
    let steps = (count.max(2) - 1) as i64;
    let span = high - low;
    let mut amounts: Vec<i64> = if span <= steps {
        (low..=high).collect()
    } else {
        (0..=steps).map(|k| low + ((span as i128 * k as i128) / steps as i128) as i64).collect()
    };
    amounts.dedup();
    amounts
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    pub fn sample() -> Issues {
        serde_json::from_value(json!([
            {"name": "quantity", "type": "integer", "min": 1, "max": 100, "buyer_prefers": "higher"},
            {"name": "delivery_days", "type": "integer", "min": 1, "max": 30, "buyer_prefers": "lower"},
            {"name": "warranty", "type": "enum", "values": ["none", "1y", "2y"], "buyer_prefers": "higher"}
        ]))
        .unwrap()
    }

    fn fields(rejection: Rejection) -> Vec<String> {
        match rejection {
            Rejection::Validation(errors) => errors.into_iter().map(|e| e.field).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn declared_issues_are_checked() {
        assert!(sample().validate().is_ok());
        let bad: Issues = serde_json::from_value(json!([
            {"name": "Quantity", "type": "integer", "min": 1, "max": 100, "buyer_prefers": "higher"},
            {"name": "price", "type": "integer", "min": 1, "max": 100, "buyer_prefers": "higher"},
            {"name": "days", "type": "integer", "min": 5, "max": 5, "buyer_prefers": "lower"},
            {"name": "days", "type": "enum", "values": ["a"], "buyer_prefers": "lower"},
            {"name": "colour", "type": "enum", "values": ["red", "red"], "buyer_prefers": "lower"}
        ]))
        .unwrap();
        assert_eq!(
            fields(bad.validate().unwrap_err()),
            [
                "issues[0].name",
                "issues[1].name",
                "issues[2].max",
                "issues[3].name",
                "issues[3].values",
                "issues[4].values"
            ]
        );
        for wrong in [
            json!([{"name": "q", "type": "float", "min": 1, "max": 2, "buyer_prefers": "higher"}]),
            json!([{"name": "q", "type": "integer", "min": 1, "max": 2}]),
            json!([{"name": "q", "type": "integer", "min": 1.5, "max": 2, "buyer_prefers": "higher"}]),
            json!([{"name": "q", "type": "integer", "min": 1, "max": 2, "buyer_prefers": "more"}]),
        ] {
            assert!(serde_json::from_value::<Issues>(wrong.clone()).is_err(), "{wrong}");
        }
    }

    #[test]
    fn terms_are_read_against_the_issues() {
        let issues = sample();
        let terms = json!({"quantity": 10, "delivery_days": 7, "warranty": "1y"});
        assert_eq!(issues.read_terms(Some(&terms)).unwrap(), Some(vec![10, 7, 1]));
        assert_eq!(issues.terms(&[10, 7, 1]), terms);
        let cases = [
            (json!({"quantity": 0, "delivery_days": 7, "warranty": "1y"}), "terms.quantity"),
            (json!({"quantity": 10, "delivery_days": "7", "warranty": "1y"}), "terms.delivery_days"),
            (json!({"quantity": 10, "delivery_days": 7, "warranty": "3y"}), "terms.warranty"),
            (json!({"quantity": 10.5, "delivery_days": 7, "warranty": "1y"}), "terms.quantity"),
            (json!({"quantity": 10, "delivery_days": 7}), "terms.warranty"),
            (json!({"quantity": 10, "delivery_days": 7, "warranty": "1y", "colour": "red"}), "terms.colour"),
        ];
        for (terms, field) in cases {
            assert_eq!(fields(issues.read_terms(Some(&terms)).unwrap_err()), [field], "{terms}");
        }
        assert_eq!(
            fields(issues.read_terms(None).unwrap_err()),
            ["terms.quantity", "terms.delivery_days", "terms.warranty"]
        );
        assert_eq!(fields(issues.read_terms(Some(&json!([1]))).unwrap_err()), ["terms"]);
        // Without issues, terms stay free.
        assert_eq!(Issues::default().read_terms(Some(&json!({"anything": [1]}))).unwrap(), None);
    }

    #[test]
    fn utilities_weigh_price_and_issues() {
        let issues = sample();
        let utility: Utility = serde_json::from_value(json!({
            "weights": {"price": 2, "delivery_days": 1, "warranty": 1}, "reservation": 0.5
        }))
        .unwrap();
        let mut v = Validator::new();
        utility.check(&mut v, Some(&issues));
        assert!(v.finish().is_ok());
        let seller = utility.valuation(Party::Seller, &issues, Prices { limit: 80_000, ask: 100_000 });
        assert_eq!(seller.weights, [0.5, 0.0, 0.25, 0.25]);
        // Seller: price at the ask, slowest delivery, no warranty: everything it wants.
        assert!((seller.value(&Offer { amount: 100_000, values: vec![1, 30, 0] }) - 1.0).abs() < 1e-9);
        assert!(seller.value(&Offer { amount: 80_000, values: vec![1, 1, 2] }).abs() < 1e-9);
        let buyer = utility.valuation(Party::Buyer, &issues, Prices { limit: 100_000, ask: 100_000 });
        assert_eq!(buyer.best_price, 50_000);
        assert!((buyer.value(&Offer { amount: 50_000, values: vec![1, 1, 2] }) - 1.0).abs() < 1e-9);

        let bad: Utility = serde_json::from_value(json!({
            "weights": {"price": -1, "colour": 1, "Bad": 1}, "reservation": 1.5
        }))
        .unwrap();
        let mut v = Validator::new();
        bad.check(&mut v, Some(&issues));
        assert_eq!(
            fields(v.finish().unwrap_err()),
            ["utility.weights.Bad", "utility.weights.colour", "utility.weights.price", "utility.reservation"]
        );
    }

    #[test]
    fn grids_cover_the_ends_and_the_positions() {
        let issues = sample();
        let points = grid(&issues, 5, &[&[10, 7, 1]]);
        // quantity: 1, 10, 26, 51, 75, 100; days: 1, 7, 8, 16, 23, 30; warranty: 3 values.
        assert_eq!(points.len(), 6 * 6 * 3);
        assert!(points.contains(&vec![10, 7, 1]));
        assert_eq!(price_steps(100..=104, 21), [100, 101, 102, 103, 104]);
        assert_eq!(price_steps(0..=1000, 3), [0, 500, 1000]);
        assert!(price_steps(RangeInclusive::new(5, 4), 3).is_empty());
    }
}
