//! Listings.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::{FromRow, PgConnection, PgExecutor, Postgres, QueryBuilder};
use uuid::Uuid;

use super::Page;
use haggle_domain::issues::Issues;
use haggle_domain::listing::ListingTerms;
use haggle_domain::{Currency, ListingStatus, Tier};
use sqlx::types::Json;

/// A listing as stored (read back through `row_to_json` too); shown as [`api::Listing`].
#[derive(Debug, Clone, PartialEq, Eq, FromRow, Deserialize)]
pub struct Listing {
    pub id: Uuid,
    pub seller_id: Uuid,
    pub title: String,
    pub description: String,
    pub ask_amount: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub quantity: i32,
    pub quantity_available: i32,
    #[sqlx(try_from = "String")]
    pub status: ListingStatus,
    pub negotiable: bool,
    #[sqlx(try_from = "String")]
    pub min_negotiation_tier: Tier,
    pub max_rounds: i32,
    pub bid_ttl_seconds: i32,
    pub max_threads_per_buyer: i32,
    #[sqlx(json(nullable))]
    #[serde(default)]
    pub issues: Option<Issues>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Listing {
    /// The issues negotiated beside price (none for a price-only listing).
    pub fn issues(&self) -> Issues {
        self.issues.clone().unwrap_or_default()
    }

    pub fn terms(&self) -> ListingTerms {
        ListingTerms {
            title: self.title.clone(),
            description: self.description.clone(),
            ask_amount: self.ask_amount,
            currency: self.currency,
            quantity: self.quantity,
            quantity_available: self.quantity_available,
            negotiable: self.negotiable,
            min_negotiation_tier: self.min_negotiation_tier,
            max_rounds: self.max_rounds,
            bid_ttl_seconds: self.bid_ttl_seconds,
            max_threads_per_buyer: self.max_threads_per_buyer,
            issues: self.issues(),
        }
    }
}

macro_rules! listing_columns {
    () => {
        "id, seller_id, title, description, ask_amount, currency, quantity, quantity_available, status, negotiable, \
         min_negotiation_tier, max_rounds, bid_ttl_seconds, max_threads_per_buyer, issues, created_at, updated_at"
    };
}

pub async fn insert(
    conn: &mut PgConnection,
    id: Uuid,
    seller_id: Uuid,
    terms: &ListingTerms,
) -> Result<Listing, sqlx::Error> {
    sqlx::query_as(concat!(
        "INSERT INTO listings (id, seller_id, title, description, ask_amount, currency, quantity, quantity_available,
             status, negotiable, min_negotiation_tier, max_rounds, bid_ttl_seconds, max_threads_per_buyer, issues)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'ACTIVE', $9, $10, $11, $12, $13, $14)
         RETURNING ",
        listing_columns!()
    ))
    .bind(id)
    .bind(seller_id)
    .bind(&terms.title)
    .bind(&terms.description)
    .bind(terms.ask_amount)
    .bind(terms.currency.as_str())
    .bind(terms.quantity)
    .bind(terms.quantity_available)
    .bind(terms.negotiable)
    .bind(terms.min_negotiation_tier.as_str())
    .bind(terms.max_rounds)
    .bind(terms.bid_ttl_seconds)
    .bind(terms.max_threads_per_buyer)
    .bind((!terms.issues.is_empty()).then_some(Json(&terms.issues)))
    .fetch_one(conn)
    .await
}

pub async fn get(executor: impl PgExecutor<'_>, id: Uuid) -> Result<Option<Listing>, sqlx::Error> {
    sqlx::query_as(concat!("SELECT ", listing_columns!(), " FROM listings WHERE id = $1"))
        .bind(id)
        .fetch_optional(executor)
        .await
}

/// Locks the listing against changes of status and quantity until the transaction ends.
pub async fn lock(conn: &mut PgConnection, id: Uuid) -> Result<Option<Listing>, sqlx::Error> {
    sqlx::query_as(concat!("SELECT ", listing_columns!(), " FROM listings WHERE id = $1 FOR UPDATE"))
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// A listing locked for placing a bid on it, with the database's clock.
#[derive(Debug, FromRow)]
pub struct LockedListing {
    #[sqlx(flatten)]
    pub listing: Listing,
    pub db_now: DateTime<Utc>,
}

/// Locks the listing for a placement by `buyer_id`: first an advisory lock on (listing, buyer),
/// which serialises this buyer's placements on this listing (so the count of its threads read
/// next cannot go stale), then the listing row in share mode, so that the listing cannot be
/// withdrawn or sell out while the new thread is written.
pub async fn lock_for_placement(
    conn: &mut PgConnection,
    listing_id: Uuid,
    buyer_id: Uuid,
) -> Result<Option<LockedListing>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        listing_columns!(),
        ", now() AS db_now, pg_advisory_xact_lock($2, $3)::text AS placement_lock
         FROM listings WHERE id = $1
         FOR SHARE"
    ))
    .bind(listing_id)
    .bind(placement_lock(listing_id, buyer_id).0)
    .bind(placement_lock(listing_id, buyer_id).1)
    .fetch_optional(conn)
    .await
}

/// The first half of the two-part advisory lock keys of placements: "HAGL".
const PLACEMENT_LOCK_SPACE: i32 = 0x4841_474C;

/// The two-part advisory lock a placement under locks takes on (listing, buyer).
pub fn placement_lock(listing_id: Uuid, buyer_id: Uuid) -> (i32, i32) {
    (PLACEMENT_LOCK_SPACE, placement_lock_key(listing_id, buyer_id))
}

fn placement_lock_key(listing_id: Uuid, buyer_id: Uuid) -> i32 {
    let digest = crate::secrets::sha256_parts(&[listing_id.as_bytes(), buyer_id.as_bytes()]);
    i32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// The statement that reads [`BuyerThreads`] of the buyer and listing given (SQL expressions).
macro_rules! buyer_threads_query {
    ($listing:literal, $buyer:literal) => {
        concat!(
            "SELECT count(*) AS thread_count,
                    (array_agg(t.id) FILTER (WHERE t.status = 'ACTIVE'))[1] AS active_thread_id,
                    max(t.expires_at) FILTER (WHERE t.status = 'ACTIVE') AS active_expires_at,
                    (array_agg(t.last_bid_id) FILTER (WHERE t.status = 'ACTIVE'))[1] AS active_last_bid_id
             FROM threads t WHERE t.listing_id = ",
            $listing,
            " AND t.buyer_id = ",
            $buyer
        )
    };
}

/// A listing and the buyer's threads on it, read together without locks, for a placement made
/// in one statement (which locks the listing and checks what could have changed).
#[derive(Debug, FromRow)]
pub struct PlacementContext {
    #[sqlx(flatten)]
    pub listing: Listing,
    pub db_now: DateTime<Utc>,
    #[sqlx(flatten)]
    pub mine: BuyerThreads,
}

pub async fn read_for_placement(
    conn: &mut PgConnection,
    listing_id: Uuid,
    buyer_id: Uuid,
) -> Result<Option<PlacementContext>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        listing_columns!(),
        ", now() AS db_now, m.*
         FROM listings
         CROSS JOIN LATERAL (",
        buyer_threads_query!("listings.id", "$2"),
        ") m
         WHERE listings.id = $1"
    ))
    .bind(listing_id)
    .bind(buyer_id)
    .fetch_optional(conn)
    .await
}

/// The buyer's threads on a listing, as placing a bid must know them.
#[derive(Debug, Default, FromRow)]
pub struct BuyerThreads {
    /// Threads this buyer has had on the listing, whatever their status.
    pub thread_count: i64,
    /// The buyer's ACTIVE thread on the listing, with its deadline and pending bid.
    pub active_thread_id: Option<Uuid>,
    pub active_expires_at: Option<DateTime<Utc>>,
    pub active_last_bid_id: Option<Uuid>,
}

/// Read after [`lock_for_placement`], in a statement of its own, so that it sees every thread
/// committed while the locks were awaited.
pub async fn buyer_threads(
    conn: &mut PgConnection,
    listing_id: Uuid,
    buyer_id: Uuid,
) -> Result<BuyerThreads, sqlx::Error> {
    sqlx::query_as(buyer_threads_query!("$1", "$2")).bind(listing_id).bind(buyer_id).fetch_one(conn).await
}

pub async fn update_terms(conn: &mut PgConnection, id: Uuid, terms: &ListingTerms) -> Result<Listing, sqlx::Error> {
    sqlx::query_as(concat!(
        "UPDATE listings SET title = $2, description = $3, ask_amount = $4, quantity = $5, quantity_available = $6,
             negotiable = $7, min_negotiation_tier = $8, max_rounds = $9, bid_ttl_seconds = $10,
             max_threads_per_buyer = $11, updated_at = now()
         WHERE id = $1
         RETURNING ",
        listing_columns!()
    ))
    .bind(id)
    .bind(&terms.title)
    .bind(&terms.description)
    .bind(terms.ask_amount)
    .bind(terms.quantity)
    .bind(terms.quantity_available)
    .bind(terms.negotiable)
    .bind(terms.min_negotiation_tier.as_str())
    .bind(terms.max_rounds)
    .bind(terms.bid_ttl_seconds)
    .bind(terms.max_threads_per_buyer)
    .fetch_one(conn)
    .await
}

pub async fn withdraw(conn: &mut PgConnection, id: Uuid) -> Result<Listing, sqlx::Error> {
    sqlx::query_as(concat!(
        "UPDATE listings SET status = 'WITHDRAWN', updated_at = now() WHERE id = $1 RETURNING ",
        listing_columns!()
    ))
    .bind(id)
    .fetch_one(conn)
    .await
}

#[derive(Debug, Default)]
pub struct ListingFilter {
    pub seller_id: Option<Uuid>,
    pub status: Option<ListingStatus>,
    pub q: Option<String>,
    pub after: Option<Uuid>,
    pub limit: i64,
}

/// Newest first. The cursor is the id of the last listing of the previous page; ids are
/// UUIDv7, so their order is their creation order.
pub async fn list(executor: impl PgExecutor<'_>, filter: &ListingFilter) -> Result<Page<Listing>, sqlx::Error> {
    let mut query = list_query(concat!("SELECT ", listing_columns!(), " FROM listings WHERE true"), filter);
    // A search is planned for its own words, never from a cached generic plan: the generic
    // plan cannot tell a rare word (a few listings, found through the trigram indexes) from a
    // common one (the newest listings, found by walking the primary key), and picks the walk,
    // which reads every listing when the word is rare.
    let searching = filter.q.is_some();
    let rows = query.build_query_as::<Listing>().persistent(!searching).fetch_all(executor).await?;
    Ok(Page::from_rows(rows, filter.limit, |listing| listing.id))
}

/// The plan PostgreSQL makes for `list` with this filter (`EXPLAIN`'s text), to check which
/// indexes it reads.
pub async fn plan_of_list(executor: impl PgExecutor<'_>, filter: &ListingFilter) -> Result<String, sqlx::Error> {
    let mut query = list_query("EXPLAIN SELECT * FROM listings WHERE true", filter);
    let lines: Vec<String> = query.build_query_scalar().persistent(false).fetch_all(executor).await?;
    Ok(lines.join("\n"))
}

fn list_query<'a>(select: &str, filter: &'a ListingFilter) -> QueryBuilder<'a, Postgres> {
    let mut query: QueryBuilder<Postgres> = QueryBuilder::new(select);
    if let Some(seller_id) = filter.seller_id {
        query.push(" AND seller_id = ").push_bind(seller_id);
    }
    if let Some(status) = filter.status {
        query.push(" AND status = ").push_bind(status.as_str());
    }
    if let Some(q) = &filter.q {
        let pattern = super::like_pattern(q);
        query.push(" AND (title ILIKE ").push_bind(pattern.clone());
        query.push(" OR description ILIKE ").push_bind(pattern).push(")");
    }
    if let Some(after) = filter.after {
        query.push(" AND id < ").push_bind(after);
    }
    query.push(" ORDER BY id DESC LIMIT ").push_bind(filter.limit + 1);
    query
}

/// A page of the listings for sale (ACTIVE), newest first, by offset, and how many there are in
/// all: the compatibility routes' product catalogue.
pub async fn for_sale(conn: &mut PgConnection, limit: i64, offset: i64) -> Result<(Vec<Listing>, i64), sqlx::Error> {
    let listings = sqlx::query_as(concat!(
        "SELECT ",
        listing_columns!(),
        " FROM listings WHERE status = 'ACTIVE' ORDER BY id DESC LIMIT $1 OFFSET $2"
    ))
    .bind(limit)
    .bind(offset)
    .fetch_all(&mut *conn)
    .await?;
    let total = sqlx::query_scalar("SELECT count(*) FROM listings WHERE status = 'ACTIVE'").fetch_one(conn).await?;
    Ok((listings, total))
}
