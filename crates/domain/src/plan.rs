//! An `installments` negotiation on an order: a payment plan splitting what is outstanding into
//! 2 to 12 installments, and, once agreed, which of them confirmed payments cover.
//!
//! The buyer opens with installments whose amounts sum exactly to the order's outstanding
//! amount, due in strictly ascending order, each in the future, the first within
//! [`FIRST_DUE_WITHIN_DAYS`] days; a counter changes the split and the dates, never the sum.
//!
//! Confirmed payments fill the installments in due order: with `paid` the confirmed amount paid
//! since the plan was agreed, installment `i` is PAID when `paid` reaches the sum of
//! installments `0..=i`; otherwise it is OVERDUE once its due date has come, and DUE before.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::money::MIN_AMOUNT;
use crate::rejection::{Rejection, Validator};

/// The fewest and the most installments of a plan.
pub const MIN_INSTALLMENTS: usize = 2;
pub const MAX_INSTALLMENTS: usize = 12;
/// How soon the first installment must fall due, in days.
pub const FIRST_DUE_WITHIN_DAYS: i64 = 30;

/// One installment: an amount in minor units, due at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Installment {
    #[serde(deserialize_with = "crate::whole::number")]
    pub amount: i64,
    pub due: DateTime<Utc>,
}

/// An installments negotiation's terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallmentTerms {
    pub installments: Vec<Installment>,
}

impl InstallmentTerms {
    /// The plan's total, saturating (a sum past `i64` is refused as not matching anyway).
    pub fn total(&self) -> i64 {
        self.installments.iter().fold(0i64, |sum, installment| sum.saturating_add(installment.amount))
    }
}

/// Checks what does not depend on the order or the clock: 2 to 12 installments, each at least
/// the smallest amount, due dates strictly ascending.
pub fn check_shape(terms: &InstallmentTerms, check: &mut Validator) {
    let installments = &terms.installments;
    if !(MIN_INSTALLMENTS..=MAX_INSTALLMENTS).contains(&installments.len()) {
        check.fail("terms.installments", format!("must list {MIN_INSTALLMENTS} to {MAX_INSTALLMENTS} installments"));
    }
    for (i, installment) in installments.iter().enumerate() {
        if installment.amount < MIN_AMOUNT {
            check.fail(&format!("terms.installments[{i}].amount"), format!("must be at least {MIN_AMOUNT}"));
        }
        if i > 0 && installment.due <= installments[i - 1].due {
            check.fail(&format!("terms.installments[{i}].due"), "must be after the previous installment's");
        }
    }
}

/// Checks what does: the amounts sum to `total` exactly (the order's outstanding amount, or on a
/// counter the sum of the bid it answers), every installment is due after `now`, the first within
/// [`FIRST_DUE_WITHIN_DAYS`] days of it.
pub fn check_against(terms: &InstallmentTerms, total: i64, now: DateTime<Utc>, check: &mut Validator) {
    let sum = terms.total();
    if sum != total {
        check.fail("terms.installments", format!("the amounts sum to {sum}; they must sum to exactly {total}"));
    }
    for (i, installment) in terms.installments.iter().enumerate() {
        if installment.due <= now {
            check.fail(&format!("terms.installments[{i}].due"), "must be in the future");
        }
    }
    if let Some(first) = terms.installments.first()
        && first.due > now + Duration::days(FIRST_DUE_WITHIN_DAYS)
    {
        check.fail("terms.installments[0].due", format!("must be within {FIRST_DUE_WITHIN_DAYS} days"));
    }
}

/// May a plan be agreed on an order that already has one? No: a plan, once agreed, is the
/// order's payment schedule.
pub fn may_plan(has_plan: bool) -> Result<(), Rejection> {
    if has_plan {
        return Err(Rejection::InvalidTransition {
            current_status: "PLANNED",
            detail: "the order has an agreed payment plan already".into(),
        });
    }
    Ok(())
}

/// Where an installment of an agreed plan stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum InstallmentStatus {
    Due,
    Paid,
    Overdue,
}

/// Each installment's status, `paid` being the confirmed amount paid since the plan was agreed.
pub fn statuses(plan: &[Installment], paid: i64, now: DateTime<Utc>) -> Vec<InstallmentStatus> {
    let mut through = 0i64;
    plan.iter()
        .map(|installment| {
            through = through.saturating_add(installment.amount);
            if paid >= through {
                InstallmentStatus::Paid
            } else if installment.due <= now {
                InstallmentStatus::Overdue
            } else {
                InstallmentStatus::Due
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(days: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap() + Duration::days(days)
    }

    fn plan(parts: &[(i64, i64)]) -> InstallmentTerms {
        InstallmentTerms {
            installments: parts.iter().map(|&(amount, due)| Installment { amount, due: at(due) }).collect(),
        }
    }

    fn checked(terms: &InstallmentTerms, total: i64, now: i64) -> Result<(), Rejection> {
        let mut check = Validator::new();
        check_shape(terms, &mut check);
        check_against(terms, total, at(now), &mut check);
        check.finish()
    }

    #[test]
    fn a_plan_splits_the_outstanding_amount() {
        assert!(checked(&plan(&[(5_000, 1), (5_000, 31)]), 10_000, 0).is_ok());
        assert!(checked(&plan(&[(5_000, 1), (4_999, 31)]), 10_000, 0).is_err(), "does not sum");
        assert!(checked(&plan(&[(5_000, 31), (5_000, 1)]), 10_000, 0).is_err(), "unordered");
        assert!(checked(&plan(&[(5_000, 1), (5_000, 1)]), 10_000, 0).is_err(), "same date");
        assert!(checked(&plan(&[(5_000, 31), (5_000, 40)]), 10_000, 0).is_err(), "first too late");
        assert!(checked(&plan(&[(5_000, 0), (5_000, 40)]), 10_000, 0).is_err(), "first not in the future");
        assert!(checked(&plan(&[(10_000, 1)]), 10_000, 0).is_err(), "one installment");
        assert!(checked(&plan(&[(9_950, 1), (50, 2)]), 10_000, 0).is_err(), "too small");
    }

    proptest! {
        /// A plan passes exactly when it has 2 to 12 installments of at least the smallest
        /// amount, summing to the total, due strictly ascending, all after now, the first within
        /// 30 days.
        #[test]
        fn a_plan_is_valid_exactly_as_the_rules_say(
            parts in prop::collection::vec((0i64..20_000, -5i64..60), 0..14),
            total in 0i64..200_000,
        ) {
            let terms = plan(&parts);
            let valid = (MIN_INSTALLMENTS..=MAX_INSTALLMENTS).contains(&parts.len())
                && parts.iter().all(|&(amount, _)| amount >= MIN_AMOUNT)
                && parts.windows(2).all(|pair| pair[0].1 < pair[1].1)
                && parts.iter().map(|&(amount, _)| amount).sum::<i64>() == total
                && parts.iter().all(|&(_, due)| due > 0)
                && parts.first().is_some_and(|&(_, due)| due <= FIRST_DUE_WITHIN_DAYS);
            prop_assert_eq!(checked(&terms, total, 0).is_ok(), valid);
        }

        /// Confirmed payments fill installments in due order: the paid ones are a prefix, each
        /// paid exactly when the confirmed total covers it and all before it; an unpaid one is
        /// overdue exactly when its date has come.
        #[test]
        fn payments_fill_installments_in_due_order(
            parts in prop::collection::vec((100i64..20_000, 1i64..60), 2..12),
            paid in 0i64..300_000,
            now in 0i64..70,
        ) {
            let mut parts = parts;
            parts.sort_by_key(|&(_, due)| due);
            let terms = plan(&parts);
            let statuses = statuses(&terms.installments, paid, at(now));
            let mut through = 0;
            let mut unpaid_seen = false;
            for (installment, status) in terms.installments.iter().zip(&statuses) {
                through += installment.amount;
                let expected = if paid >= through {
                    InstallmentStatus::Paid
                } else if installment.due <= at(now) {
                    InstallmentStatus::Overdue
                } else {
                    InstallmentStatus::Due
                };
                prop_assert_eq!(*status, expected);
                if *status == InstallmentStatus::Paid {
                    prop_assert!(!unpaid_seen);
                } else {
                    unpaid_seen = true;
                }
            }
        }
    }
}
