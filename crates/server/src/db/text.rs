//! Text columns read as the domain's and the wire's enums by the query macros: a column written
//! `status AS "status: Text<BidStatus>"` decodes through the enum's parser, and the macro's
//! conversion into the row's field gives the enum itself.

use std::fmt::Display;

use haggle_api::{DeliveryStatus, EventType, OrderStatus, PolicyLevel, WebhookStatus};
use haggle_domain::approval::{ApprovalStatus, BudgetScope, Move};
use haggle_domain::{BidStatus, Currency, ListingStatus, Party, Reason, ThreadStatus, Tier};
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgTypeInfo, PgValueRef};
use sqlx::{Decode, Postgres, Type};

/// A value stored as text and parsed when read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Text<T>(pub T);

impl<T> Type<Postgres> for Text<T> {
    fn type_info() -> PgTypeInfo {
        <String as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <String as Type<Postgres>>::compatible(ty)
    }
}

impl<'r, T> Decode<'r, Postgres> for Text<T>
where
    T: TryFrom<String>,
    T::Error: Display,
{
    fn decode(value: PgValueRef<'r>) -> Result<Text<T>, BoxDynError> {
        let text = <String as Decode<Postgres>>::decode(value)?;
        T::try_from(text).map(Text).map_err(|error| error.to_string().into())
    }
}

/// Each enum read through [`Text`] is the macro's conversion's target.
macro_rules! read_as_text {
    ($($ty:ty),* $(,)?) => {$(
        impl From<Text<$ty>> for $ty {
            fn from(text: Text<$ty>) -> $ty {
                text.0
            }
        }
    )*};
}

read_as_text!(
    ApprovalStatus,
    BidStatus,
    BudgetScope,
    Currency,
    DeliveryStatus,
    EventType,
    ListingStatus,
    Move,
    OrderStatus,
    Party,
    PolicyLevel,
    Reason,
    ThreadStatus,
    Tier,
    WebhookStatus,
);
