//! Listings.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::{FromRow, PgConnection, PgExecutor, Postgres, QueryBuilder};
use uuid::Uuid;

use super::Page;
use super::plans::generic_plan;
use haggle_domain::bid::{ConcessionRule, CounterTerms};
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
    /// Whether a counter may retract its mover's earlier concessions (SPEC §2). Read as strict
    /// from a row of a build that did not know it (a remembered listing, a backup's JSON).
    #[sqlx(try_from = "String")]
    #[serde(default)]
    pub concession_rule: ConcessionRule,
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
            concession_rule: self.concession_rule,
        }
    }

    /// What a counter on this listing is held to beside the two positions.
    pub fn counter_terms(&self) -> CounterTerms {
        CounterTerms { rule: self.concession_rule, ask: self.ask_amount }
    }
}

/// The columns of [`Listing`], for the list built at run time.
const LISTING_COLUMNS: &str = "id, seller_id, title, description, ask_amount, currency, quantity, quantity_available, \
     status, negotiable, min_negotiation_tier, max_rounds, bid_ttl_seconds, max_threads_per_buyer, issues, \
     concession_rule, created_at, updated_at";

pub async fn insert(
    conn: &mut PgConnection,
    id: Uuid,
    seller_id: Uuid,
    terms: &ListingTerms,
) -> Result<Listing, sqlx::Error> {
    let Json(listing) = sqlx::query_scalar!(
        r#"INSERT INTO listings AS l (id, seller_id, title, description, ask_amount, currency, quantity,
               quantity_available, status, negotiable, min_negotiation_tier, max_rounds, bid_ttl_seconds,
               max_threads_per_buyer, issues, concession_rule)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'ACTIVE', $9, $10, $11, $12, $13, $14, $15)
           RETURNING row_to_json(l) AS "listing!: Json<Listing>""#,
        id,
        seller_id,
        terms.title,
        terms.description,
        terms.ask_amount,
        terms.currency.as_str(),
        terms.quantity,
        terms.quantity_available,
        terms.negotiable,
        terms.min_negotiation_tier.as_str(),
        terms.max_rounds,
        terms.bid_ttl_seconds,
        terms.max_threads_per_buyer,
        (!terms.issues.is_empty()).then_some(Json(&terms.issues)) as _,
        terms.concession_rule.as_str(),
    )
    .fetch_one(conn)
    .await?;
    Ok(listing)
}

pub async fn get(executor: impl PgExecutor<'_>, id: Uuid) -> Result<Option<Listing>, sqlx::Error> {
    let listing =
        sqlx::query_scalar!(r#"SELECT row_to_json(l) AS "listing!: Json<Listing>" FROM listings l WHERE id = $1"#, id)
            .fetch_optional(executor)
            .await?;
    Ok(listing.map(|listing| listing.0))
}

/// Locks the listing against changes of status and quantity until the transaction ends.
pub async fn lock(conn: &mut PgConnection, id: Uuid) -> Result<Option<Listing>, sqlx::Error> {
    let listing = sqlx::query_scalar!(
        r#"SELECT row_to_json(l) AS "listing!: Json<Listing>" FROM listings l WHERE id = $1 FOR UPDATE"#,
        id
    )
    .fetch_optional(conn)
    .await?;
    Ok(listing.map(|listing| listing.0))
}

/// A listing locked for placing a bid on it, with the database's clock.
#[derive(Debug)]
pub struct LockedListing {
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
    let (space, key) = placement_lock(listing_id, buyer_id);
    let row = sqlx::query!(
        r#"SELECT row_to_json(l) AS "listing!: Json<Listing>", now() AS "db_now!",
                  pg_advisory_xact_lock($2, $3)::text AS placement_lock
           FROM listings l WHERE id = $1
           FOR SHARE"#,
        listing_id,
        space,
        key,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| LockedListing { listing: row.listing.0, db_now: row.db_now }))
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

/// A listing and the buyer's threads on it, read together without locks, for a placement made
/// in one statement (which locks the listing and checks what could have changed).
#[derive(Debug)]
pub struct PlacementContext {
    pub listing: Listing,
    pub db_now: DateTime<Utc>,
    pub mine: BuyerThreads,
}

/// The buyer `$buyer`'s price threads `t` on the listing `$listing`, as a condition. The row
/// comparisons name the pair `(listing_id, buyer_id)` only `threads_listing_buyer_idx` orders,
/// so that every plan counts the pair's entries there: without them PostgreSQL, planning on a
/// table it has no statistics for (and keeping that plan on the connection as the table grows),
/// looks the buyer up in `threads_buyer_id_idx` and filters by listing, reading the buyer's
/// whole history for each placement.
macro_rules! buyer_price_threads {
    ($listing:literal, $buyer:literal) => {
        concat!(
            "t.listing_id = ",
            $listing,
            " AND (t.listing_id, t.buyer_id) >= (",
            $listing,
            ", ",
            $buyer,
            ")",
            " AND (t.listing_id, t.buyer_id) <= (",
            $listing,
            ", ",
            $buyer,
            ")",
            " AND t.kind = 'price'"
        )
    };
}

pub(crate) use buyer_price_threads;

/// What [`BuyerThreads`] reads of the threads `t` that a condition chooses.
macro_rules! buyer_threads_columns {
    () => {
        "count(*) AS thread_count,
         (array_agg(t.id) FILTER (WHERE t.status = 'ACTIVE'))[1] AS active_thread_id,
         max(t.expires_at) FILTER (WHERE t.status = 'ACTIVE') AS active_expires_at,
         (array_agg(t.last_bid_id) FILTER (WHERE t.status = 'ACTIVE'))[1] AS active_last_bid_id"
    };
}

/// The statement of [`read_for_placement`].
const READ_FOR_PLACEMENT: &str = concat!(
    "SELECT row_to_json(l) AS listing, now() AS db_now, m.*
     FROM listings l
     CROSS JOIN LATERAL (SELECT ",
    buyer_threads_columns!(),
    " FROM threads t WHERE ",
    buyer_price_threads!("l.id", "$2"),
    ") m WHERE l.id = $1"
);

/// The statement of [`buyer_threads`].
const BUYER_THREADS: &str =
    concat!("SELECT ", buyer_threads_columns!(), " FROM threads t WHERE ", buyer_price_threads!("$1", "$2"));

/// A listing read with the buyer's threads on it.
#[derive(FromRow)]
struct PlacementRow {
    listing: Json<Listing>,
    db_now: DateTime<Utc>,
    #[sqlx(flatten)]
    mine: BuyerThreads,
}

/// Reads the buyer's threads as [`buyer_threads`] does, in the same statement as the listing.
pub async fn read_for_placement(
    conn: &mut PgConnection,
    listing_id: Uuid,
    buyer_id: Uuid,
) -> Result<Option<PlacementContext>, sqlx::Error> {
    // Built at run time: it splices the buyer's threads (`buyer_price_threads`), which
    // `buyer_threads` and the placement's statement read too.
    let row: Option<PlacementRow> =
        sqlx::query_as(READ_FOR_PLACEMENT).bind(listing_id).bind(buyer_id).fetch_optional(conn).await?;
    Ok(row.map(|row| PlacementContext { listing: row.listing.0, db_now: row.db_now, mine: row.mine }))
}

/// The generic plans PostgreSQL makes for [`read_for_placement`] and [`buyer_threads`] (`EXPLAIN`'s
/// text, one plan each), for a test that checks they count the buyer's threads on the listing
/// through `threads_listing_buyer_idx`.
pub async fn plans_of_buyer_threads(conn: &mut PgConnection) -> Result<Vec<String>, sqlx::Error> {
    let mut plans = Vec::new();
    for statement in [READ_FOR_PLACEMENT, BUYER_THREADS] {
        plans.push(generic_plan(&mut *conn, statement).await?);
    }
    Ok(plans)
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
/// committed while the locks were awaited. [`read_for_placement`] reads the same.
pub async fn buyer_threads(
    conn: &mut PgConnection,
    listing_id: Uuid,
    buyer_id: Uuid,
) -> Result<BuyerThreads, sqlx::Error> {
    // Built at run time, as `read_for_placement` is.
    sqlx::query_as(BUYER_THREADS).bind(listing_id).bind(buyer_id).fetch_one(conn).await
}

pub async fn update_terms(conn: &mut PgConnection, id: Uuid, terms: &ListingTerms) -> Result<Listing, sqlx::Error> {
    let Json(listing) = sqlx::query_scalar!(
        r#"UPDATE listings l SET title = $2, description = $3, ask_amount = $4, quantity = $5, quantity_available = $6,
               negotiable = $7, min_negotiation_tier = $8, max_rounds = $9, bid_ttl_seconds = $10,
               max_threads_per_buyer = $11, concession_rule = $12, updated_at = now()
           WHERE id = $1
           RETURNING row_to_json(l) AS "listing!: Json<Listing>""#,
        id,
        terms.title,
        terms.description,
        terms.ask_amount,
        terms.quantity,
        terms.quantity_available,
        terms.negotiable,
        terms.min_negotiation_tier.as_str(),
        terms.max_rounds,
        terms.bid_ttl_seconds,
        terms.max_threads_per_buyer,
        terms.concession_rule.as_str(),
    )
    .fetch_one(conn)
    .await?;
    Ok(listing)
}

pub async fn withdraw(conn: &mut PgConnection, id: Uuid) -> Result<Listing, sqlx::Error> {
    let Json(listing) = sqlx::query_scalar!(
        r#"UPDATE listings l SET status = 'WITHDRAWN', updated_at = now()
           WHERE id = $1 RETURNING row_to_json(l) AS "listing!: Json<Listing>""#,
        id
    )
    .fetch_one(conn)
    .await?;
    Ok(listing)
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
    // Built at run time: each filter gives its own condition, and `plan_of_list` explains the
    // same statement.
    let select = format!("SELECT {LISTING_COLUMNS} FROM listings WHERE true");
    let mut query = list_query(&select, filter);
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
    let listings = sqlx::query_scalar!(
        r#"SELECT row_to_json(l) AS "listing!: Json<Listing>" FROM listings l
           WHERE status = 'ACTIVE' ORDER BY id DESC LIMIT $1 OFFSET $2"#,
        limit,
        offset,
    )
    .fetch_all(&mut *conn)
    .await?;
    let total = sqlx::query_scalar!(r#"SELECT count(*) AS "total!" FROM listings WHERE status = 'ACTIVE'"#)
        .fetch_one(conn)
        .await?;
    Ok((listings.into_iter().map(|listing| listing.0).collect(), total))
}
