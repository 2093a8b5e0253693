//! A `schedule` negotiation on an order: the handover's time windows, its method and place, and
//! the one window an acceptance fixes as the order's appointment.
//!
//! The opener proposes 1 to [`MAX_WINDOWS`] windows, each in the future, at most
//! [`MAX_WINDOW_DAYS`] days long, none overlapping another; a counter proposes others. The
//! acceptor names the window it takes by its index in the pending bid's list
//! (`{"terms": {"chosen": 0}}`), and that window must not have begun.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::rejection::{Rejection, Validator, text};

/// The most windows one bid proposes.
pub const MAX_WINDOWS: usize = 5;
/// The longest window, in days.
pub const MAX_WINDOW_DAYS: i64 = 7;
/// The longest place, in characters.
pub const MAX_PLACE_CHARS: usize = 200;

/// A span of time in which the handover may happen: `start` strictly before `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Window {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

impl Window {
    /// Whether the two windows share a moment (touching ends do not).
    pub fn overlaps(&self, other: &Window) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// How the goods change hands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Method {
    Pickup,
    Delivery,
    Other,
}

impl Method {
    pub const ALL: [Method; 3] = [Method::Pickup, Method::Delivery, Method::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Pickup => "pickup",
            Method::Delivery => "delivery",
            Method::Other => "other",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Method {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Method::ALL
            .into_iter()
            .find(|method| method.as_str() == s)
            .ok_or_else(|| format!("unknown method `{s}`; expected one of pickup, delivery, other"))
    }
}

impl TryFrom<String> for Method {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        value.parse()
    }
}

/// A schedule's terms: the windows proposed, how, and optionally where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleTerms {
    pub windows: Vec<Window>,
    pub method: Method,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<String>,
}

/// Checks what does not depend on the clock: 1 to [`MAX_WINDOWS`] windows, each starting before
/// it ends and at most [`MAX_WINDOW_DAYS`] days long, none overlapping another; a place of 1 to
/// [`MAX_PLACE_CHARS`] characters.
pub fn check_shape(terms: &ScheduleTerms, check: &mut Validator) {
    let windows = &terms.windows;
    if windows.is_empty() || windows.len() > MAX_WINDOWS {
        check.fail("terms.windows", format!("must list 1 to {MAX_WINDOWS} windows"));
    }
    for (i, window) in windows.iter().enumerate() {
        let field = format!("terms.windows[{i}]");
        if window.start >= window.end {
            check.fail(&field, "must start before it ends");
        } else if window.end - window.start > Duration::days(MAX_WINDOW_DAYS) {
            check.fail(&field, format!("must be at most {MAX_WINDOW_DAYS} days long"));
        }
        if let Some(j) = windows[..i].iter().position(|earlier| earlier.overlaps(window)) {
            check.fail(&field, format!("overlaps window {j}"));
        }
    }
    if let Some(place) = &terms.place {
        check.check("terms.place", text(place, true, MAX_PLACE_CHARS));
    }
}

/// Checks what does: every window starts after `now`.
pub fn check_future(terms: &ScheduleTerms, now: DateTime<Utc>, check: &mut Validator) {
    for (i, window) in terms.windows.iter().enumerate() {
        if window.start <= now {
            check.fail(&format!("terms.windows[{i}]"), "must start in the future");
        }
    }
}

/// What an acceptance of a schedule bid says: the index of the window taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Choice {
    chosen: usize,
}

/// Whether an acceptance's terms could take a window of some schedule bid: `{"chosen": i}` with
/// `i` below [`MAX_WINDOWS`]. Which window, and whether it is still ahead, depends on the bid
/// ([`choose`]).
pub fn is_choice(acceptance: &serde_json::Value) -> bool {
    serde_json::from_value::<Choice>(acceptance.clone()).is_ok_and(|choice| choice.chosen < MAX_WINDOWS)
}

/// The window an acceptance takes of the pending bid's `terms`: `acceptance` must be
/// `{"chosen": i}` with `i` an index into its windows, and that window must not have begun at
/// `now`. Refused under `terms.chosen` otherwise.
pub fn choose(
    terms: &ScheduleTerms,
    acceptance: Option<&serde_json::Value>,
    now: DateTime<Utc>,
) -> Result<Window, Rejection> {
    let invalid = |message: String| Rejection::invalid("terms.chosen", message);
    let count = terms.windows.len();
    let Some(acceptance) = acceptance.filter(|value| !value.is_null()) else {
        return Err(invalid(format!(
            "is required: the index (0 to {}) of the pending bid's window to take",
            count.saturating_sub(1)
        )));
    };
    let choice: Choice = serde_json::from_value(acceptance.clone()).map_err(|error| {
        invalid(format!("must be the index (0 to {}) of one of the pending bid's windows: {error}", count - 1))
    })?;
    let window = terms.windows.get(choice.chosen).ok_or_else(|| {
        invalid(format!("the pending bid proposes {count} windows: 0 to {}", count.saturating_sub(1)))
    })?;
    if window.start <= now {
        return Err(invalid(format!("window {} has begun: choose one still ahead", choice.chosen)));
    }
    Ok(*window)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn at(hours: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap() + Duration::hours(hours)
    }

    fn terms(windows: Vec<Window>) -> ScheduleTerms {
        ScheduleTerms { windows, method: Method::Pickup, place: None }
    }

    fn shape(terms: &ScheduleTerms) -> Result<(), Rejection> {
        let mut check = Validator::new();
        check_shape(terms, &mut check);
        check.finish()
    }

    #[test]
    fn a_choice_names_a_window_still_ahead() {
        let schedule = terms(vec![Window { start: at(2), end: at(4) }, Window { start: at(10), end: at(12) }]);
        assert_eq!(choose(&schedule, Some(&json!({"chosen": 1})), at(0)), Ok(schedule.windows[1]));
        for bad in [json!({"chosen": 2}), json!({"chosen": -1}), json!({"chosen": "0"}), json!({}), json!({"x": 0})] {
            assert!(choose(&schedule, Some(&bad), at(0)).is_err(), "{bad}");
        }
        assert!(choose(&schedule, None, at(0)).is_err());
        assert!(choose(&schedule, Some(&json!({"chosen": 0})), at(3)).is_err());
        assert!(is_choice(&json!({"chosen": 0})) && is_choice(&json!({"chosen": 4})));
        for bad in [json!({"chosen": 5}), json!({"chosen": -1}), json!({"chosen": 0, "x": 1}), json!(null), json!(3)] {
            assert!(!is_choice(&bad), "{bad}");
        }
    }

    #[test]
    fn a_place_is_short_text() {
        let mut schedule = terms(vec![Window { start: at(2), end: at(4) }]);
        schedule.place = Some("Dock 4".into());
        assert!(shape(&schedule).is_ok());
        schedule.place = Some(" ".into());
        assert!(shape(&schedule).is_err());
        schedule.place = Some("x".repeat(MAX_PLACE_CHARS + 1));
        assert!(shape(&schedule).is_err());
    }

    fn window() -> impl Strategy<Value = Window> {
        (-48i64..400, -10i64..200).prop_map(|(start, length)| Window { start: at(start), end: at(start + length) })
    }

    proptest! {
        /// Windows are accepted exactly when there are 1 to 5 of them, each starts before it
        /// ends, lasts at most 7 days, and overlaps no other.
        #[test]
        fn windows_are_valid_exactly_as_the_rules_say(windows in prop::collection::vec(window(), 0..8)) {
            let valid = (1..=MAX_WINDOWS).contains(&windows.len())
                && windows.iter().all(|w| w.start < w.end && w.end - w.start <= Duration::days(MAX_WINDOW_DAYS))
                && windows.iter().enumerate().all(|(i, a)| windows[..i].iter().all(|b| !a.overlaps(b)));
            prop_assert_eq!(shape(&terms(windows)).is_ok(), valid);
        }

        /// Every window must start after the clock; a window starting at `now` exactly has begun.
        #[test]
        fn windows_lie_in_the_future(windows in prop::collection::vec(window(), 1..5), now in -48i64..48) {
            let mut check = Validator::new();
            let schedule = terms(windows);
            check_future(&schedule, at(now), &mut check);
            prop_assert_eq!(check.finish().is_ok(), schedule.windows.iter().all(|w| w.start > at(now)));
        }

        /// A choice is taken exactly when it indexes a window that has not begun, and it is
        /// that window.
        #[test]
        fn a_choice_takes_the_window_it_names(
            windows in prop::collection::vec(window(), 1..5),
            chosen in 0usize..7,
            now in -48i64..48,
        ) {
            let schedule = terms(windows);
            match choose(&schedule, Some(&json!({"chosen": chosen})), at(now)) {
                Ok(window) => {
                    prop_assert_eq!(Some(&window), schedule.windows.get(chosen));
                    prop_assert!(window.start > at(now));
                }
                Err(Rejection::Validation(errors)) => {
                    prop_assert_eq!(errors[0].field.as_str(), "terms.chosen");
                    prop_assert!(schedule.windows.get(chosen).is_none_or(|w| w.start <= at(now)));
                }
                Err(other) => prop_assert!(false, "unexpected refusal {:?}", other),
            }
        }
    }
}
