//! A schedule policy: the weekly availability in which the server takes a handover window on
//! its owner's behalf. When a `schedule` bid waits for the owner, the executor accepts the first
//! of its windows that lies wholly inside one declared slot and has not begun; when none does,
//! it leaves the bid to its owner.
//!
//! JSON: `{"availability": [{"day": "mon", "from": "09:00", "to": "17:00"}], "timezone_offset_minutes": 60}`:
//! each slot a day of the week and a span of the owner's local day (`from` before `to`, `to` up
//! to `24:00`), local time being UTC plus the offset.

use chrono::{DateTime, Datelike, Duration, Timelike, Utc, Weekday};
use serde::{Deserialize, Serialize};

use super::super::appointment::Window;
use super::super::rejection::Validator;

/// The most slots an availability declares.
pub const MAX_SLOTS: usize = 28;
/// The widest offset from UTC, in minutes, either way.
pub const MAX_OFFSET_MINUTES: i32 = 14 * 60;

/// A day of the week.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Day {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

impl Day {
    pub const ALL: [Day; 7] = [Day::Mon, Day::Tue, Day::Wed, Day::Thu, Day::Fri, Day::Sat, Day::Sun];

    fn of(weekday: Weekday) -> Day {
        Day::ALL[weekday.num_days_from_monday() as usize]
    }
}

/// One span of a day of the week, in the owner's local time (`HH:MM`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Slot {
    pub day: Day,
    pub from: String,
    pub to: String,
}

/// The weekly availability of a schedule policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SchedulePolicy {
    pub availability: Vec<Slot>,
    /// Local time is UTC plus this many minutes (-840 to 840).
    #[serde(default)]
    pub timezone_offset_minutes: i32,
}

/// Minutes since midnight of an `HH:MM` time, `24:00` allowed only as an end.
fn minutes(time: &str, end: bool) -> Result<u32, String> {
    let bad = || format!("must be a time HH:MM{}", if end { ", up to 24:00" } else { "" });
    let (hours, mins) = time.split_once(':').ok_or_else(bad)?;
    if hours.len() != 2 || mins.len() != 2 {
        return Err(bad());
    }
    let (hours, mins): (u32, u32) = (hours.parse().map_err(|_| bad())?, mins.parse().map_err(|_| bad())?);
    match (hours, mins) {
        (0..=23, 0..=59) => Ok(hours * 60 + mins),
        (24, 0) if end => Ok(24 * 60),
        _ => Err(bad()),
    }
}

impl SchedulePolicy {
    /// Checks the availability, its mistakes under `schedule.`: 1 to [`MAX_SLOTS`] slots, each
    /// a valid span with `from` before `to`, and an offset within [`MAX_OFFSET_MINUTES`].
    pub fn check(&self, v: &mut Validator) {
        if self.availability.is_empty() || self.availability.len() > MAX_SLOTS {
            v.fail("schedule.availability", format!("must list 1 to {MAX_SLOTS} slots"));
        }
        for (i, slot) in self.availability.iter().enumerate() {
            let from = v.check(&format!("schedule.availability[{i}].from"), minutes(&slot.from, false));
            let to = v.check(&format!("schedule.availability[{i}].to"), minutes(&slot.to, true));
            if let (Some(from), Some(to)) = (from, to)
                && from >= to
            {
                v.fail(&format!("schedule.availability[{i}]"), "`from` must be before `to`");
            }
        }
        if !(-MAX_OFFSET_MINUTES..=MAX_OFFSET_MINUTES).contains(&self.timezone_offset_minutes) {
            v.fail(
                "schedule.timezone_offset_minutes",
                format!("must be between -{MAX_OFFSET_MINUTES} and {MAX_OFFSET_MINUTES}"),
            );
        }
    }

    /// Whether `window` lies wholly inside one slot, in local time.
    pub fn covers(&self, window: &Window) -> bool {
        let offset = Duration::minutes(self.timezone_offset_minutes.into());
        let (start, end) = (window.start + offset, window.end + offset);
        let midnight = start - Duration::seconds(start.num_seconds_from_midnight().into());
        let midnight = midnight - Duration::nanoseconds(start.nanosecond().into());
        let (from_start, to_end) = ((start - midnight).num_seconds(), (end - midnight).num_seconds());
        let day = Day::of(start.weekday());
        self.availability.iter().any(|slot| {
            let (Ok(from), Ok(to)) = (minutes(&slot.from, false), minutes(&slot.to, true)) else { return false };
            slot.day == day && i64::from(from) * 60 <= from_start && to_end <= i64::from(to) * 60
        })
    }

    /// The index of the first of `windows` that has not begun at `now` and lies inside the
    /// availability: the one the policy accepts. `None` leaves the bid to its owner.
    pub fn first_inside(&self, windows: &[Window], now: DateTime<Utc>) -> Option<usize> {
        windows.iter().position(|window| window.start > now && self.covers(window))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Monday 2027-01-04, 00:00 UTC.
    fn monday() -> DateTime<Utc> {
        "2027-01-04T00:00:00Z".parse().unwrap()
    }

    fn weekdays(from: &str, to: &str) -> SchedulePolicy {
        let availability = [Day::Mon, Day::Tue, Day::Wed, Day::Thu, Day::Fri]
            .into_iter()
            .map(|day| Slot { day, from: from.into(), to: to.into() })
            .collect();
        SchedulePolicy { availability, timezone_offset_minutes: 0 }
    }

    fn checked(policy: &SchedulePolicy) -> bool {
        let mut v = Validator::new();
        policy.check(&mut v);
        v.finish().is_ok()
    }

    #[test]
    fn the_first_window_inside_the_availability_is_taken() {
        let policy = weekdays("09:00", "17:00");
        let at = |hours: i64| monday() + Duration::hours(hours);
        let windows = [
            Window { start: at(5 * 24 + 10), end: at(5 * 24 + 12) }, // Saturday
            Window { start: at(8), end: at(10) },                    // Monday, starts too early
            Window { start: at(24 + 9), end: at(24 + 17) },          // Tuesday, the whole slot
            Window { start: at(48 + 10), end: at(48 + 11) },
        ];
        assert_eq!(policy.first_inside(&windows, monday()), Some(2));
        assert_eq!(policy.first_inside(&windows, at(24 + 9)), Some(3), "a window begun is not taken");
        assert_eq!(policy.first_inside(&windows[..2], monday()), None);
        // Local time: 08:00 UTC is 09:00 an hour east.
        let east = SchedulePolicy { timezone_offset_minutes: 60, ..policy };
        assert_eq!(east.first_inside(&windows, monday()), Some(1));
    }

    #[test]
    fn availability_is_strictly_checked() {
        assert!(checked(&weekdays("09:00", "17:00")));
        assert!(checked(&weekdays("00:00", "24:00")));
        for (from, to) in [
            ("17:00", "09:00"),
            ("09:00", "09:00"),
            ("9:00", "17:00"),
            ("24:00", "24:00"),
            ("09:60", "10:00"),
            ("x", "y"),
        ] {
            assert!(!checked(&weekdays(from, to)), "{from}-{to}");
        }
        assert!(!checked(&SchedulePolicy { availability: vec![], timezone_offset_minutes: 0 }));
        assert!(!checked(&SchedulePolicy { timezone_offset_minutes: 841, ..weekdays("09:00", "17:00") }));
    }

    proptest! {
        /// Whatever the availability and the windows, a window taken has not begun and lies
        /// inside a slot of its local day; every window before it was outside or had begun.
        #[test]
        fn a_taken_window_lies_inside_a_slot(
            slots in prop::collection::vec((0usize..7, 0u32..24, 1u32..24), 1..6),
            windows in prop::collection::vec((0i64..14 * 24 * 60, 1i64..600), 1..5),
            offset in -MAX_OFFSET_MINUTES..=MAX_OFFSET_MINUTES,
            now in 0i64..3 * 24 * 60,
        ) {
            let availability = slots
                .iter()
                .map(|&(day, from, length)| Slot {
                    day: Day::ALL[day],
                    from: format!("{from:02}:00"),
                    to: format!("{:02}:00", (from + length).min(24)),
                })
                .collect();
            let policy = SchedulePolicy { availability, timezone_offset_minutes: offset };
            let windows: Vec<Window> = windows
                .iter()
                .map(|&(start, length)| {
                    let start = monday() + Duration::minutes(start);
                    Window { start, end: start + Duration::minutes(length) }
                })
                .collect();
            let now = monday() + Duration::minutes(now);
            let inside = |window: &Window| {
                let local_start = window.start + Duration::minutes(offset.into());
                let local_end = window.end + Duration::minutes(offset.into());
                let day = Day::of(local_start.weekday());
                let start_minutes = i64::from(local_start.hour() * 60 + local_start.minute());
                let end_minutes = start_minutes + (local_end - local_start).num_minutes();
                slots.iter().any(|&(slot_day, from, length)| {
                    Day::ALL[slot_day] == day
                        && i64::from(from * 60) <= start_minutes
                        && end_minutes <= i64::from((from + length).min(24) * 60)
                })
            };
            let expected = windows.iter().position(|window| window.start > now && inside(window));
            prop_assert_eq!(policy.first_inside(&windows, now), expected);
        }
    }
}
