//! `haggle listings`, `haggle threads` and `haggle orders`: a page of any as a table, or as the
//! API's JSON; `haggle order ID`: one order with its payments, the negotiations on it and its
//! timeline.

use haggle_api::ThreadWithBids;
use haggle_api::timeline;
use haggle_client::{ListingQuery, OrderQuery, ThreadQuery};
use haggle_domain::money::Price;
use haggle_domain::{ListingStatus, Party, ThreadStatus};
use uuid::Uuid;

use super::{ServerArgs, agent_id, cursor, listing_id, order_id, parse_party};

/// Paging and output, shared by `haggle listings` and `haggle threads`.
#[derive(Debug, clap::Args)]
pub struct PageArgs {
    /// How many to show (1 to 200).
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// The page after this cursor (printed after a full page).
    #[arg(long, value_parser = cursor)]
    pub cursor: Option<Uuid>,
    /// Print the page as the API's JSON.
    #[arg(long)]
    pub json: bool,
}

/// `haggle listings` options.
#[derive(Debug, clap::Args)]
pub struct ListingsArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Only listings in this status (ACTIVE, SOLD, WITHDRAWN).
    #[arg(long)]
    pub status: Option<ListingStatus>,
    /// Only listings whose title or description contains this text.
    #[arg(long)]
    pub q: Option<String>,
    /// Only this seller's listings (its agent id).
    #[arg(long, value_name = "AGENT_ID", value_parser = agent_id)]
    pub seller: Option<Uuid>,
    #[command(flatten)]
    pub page: PageArgs,
}

/// `haggle threads` options.
#[derive(Debug, clap::Args)]
pub struct ThreadsArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Only threads where I am the buyer, or the seller.
    #[arg(long, value_parser = parse_party)]
    pub role: Option<Party>,
    /// Only threads in this status (ACTIVE, ACCEPTED, REJECTED, EXPIRED, CLOSED).
    #[arg(long)]
    pub status: Option<ThreadStatus>,
    /// Only threads on this listing.
    #[arg(long, value_name = "LISTING_ID", value_parser = listing_id)]
    pub listing: Option<Uuid>,
    #[command(flatten)]
    pub page: PageArgs,
}

/// `haggle orders` options.
#[derive(Debug, clap::Args)]
pub struct OrdersArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Only orders where I am the buyer, or the seller.
    #[arg(long, value_parser = parse_party)]
    pub role: Option<Party>,
    /// Only orders on this listing.
    #[arg(long, value_name = "LISTING_ID", value_parser = listing_id)]
    pub listing: Option<Uuid>,
    #[command(flatten)]
    pub page: PageArgs,
}

/// `haggle order` options.
#[derive(Debug, clap::Args)]
pub struct OrderArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The order's id.
    #[arg(value_name = "ORDER_ID", value_parser = order_id)]
    pub id: Uuid,
    /// Print the order as the API's JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn orders(args: OrdersArgs) -> anyhow::Result<()> {
    let client = args.server.keyed_client("orders")?;
    let query = OrderQuery {
        role: args.role,
        listing_id: args.listing,
        limit: Some(args.page.limit),
        cursor: args.page.cursor,
    };
    let page = client.list_orders(&query).await?;
    if args.page.json {
        println!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(());
    }
    let me = client.me().await?;
    let rows = page
        .data
        .iter()
        .map(|order| {
            let role = if order.buyer_id == me.id { Party::Buyer } else { Party::Seller };
            vec![
                order.id.to_string(),
                order.listing_id.to_string(),
                role.as_str().to_owned(),
                order.status.as_str().to_owned(),
                Price::new(order.amount, order.currency).to_string(),
                Price::new(order.outstanding, order.currency).to_string(),
            ]
        })
        .collect::<Vec<_>>();
    print!("{}", table(&["ID", "LISTING", "ROLE", "STATUS", "AMOUNT", "OUTSTANDING"], &rows, &[4, 5]));
    more(page.next_cursor);
    Ok(())
}

pub async fn order(args: OrderArgs) -> anyhow::Result<()> {
    let client = args.server.keyed_client("order")?;
    let read = client.get_order(args.id).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&read)?);
        return Ok(());
    }
    let negotiations = negotiations_of(&client, args.id).await?;
    let order = &read.order;
    let price = |amount: i64| Price::new(amount, order.currency).to_string();
    println!("order {}  {}", order.id, order.status.as_str());
    println!("listing {}  buyer {}  seller {}", order.listing_id, order.buyer_id, order.seller_id);
    println!(
        "amount {}  paid {}  outstanding {}  refunded {}",
        price(order.amount),
        price(order.paid_amount),
        price(order.outstanding),
        price(order.refunded_amount)
    );
    if let Some(fulfilment) = &order.fulfilment {
        let reference = fulfilment.reference.as_deref().map(|r| format!("  reference {}", truncate(r, 60)));
        println!("fulfilled {}{}", fulfilment.fulfilled_at.to_rfc3339(), reference.unwrap_or_default());
    }
    if let Some(completed_at) = order.completed_at {
        println!("completed {}", completed_at.to_rfc3339());
    }
    if let Some(cancelled_at) = order.cancelled_at {
        println!("cancelled {}  refund due {}", cancelled_at.to_rfc3339(), price(order.refund_due));
    }
    if !read.payments.is_empty() {
        println!();
        let rows = read
            .payments
            .iter()
            .map(|payment| {
                vec![
                    payment.id.to_string(),
                    price(payment.amount),
                    payment.status.as_str().to_owned(),
                    truncate(&payment.reference, 32),
                    payment.dispute_reason.as_deref().map(|reason| truncate(reason, 40)).unwrap_or_default(),
                ]
            })
            .collect::<Vec<_>>();
        print!("{}", table(&["PAYMENT", "AMOUNT", "STATUS", "REFERENCE", "DISPUTED"], &rows, &[1]));
    }
    if !negotiations.is_empty() {
        println!();
        let rows = negotiations
            .iter()
            .map(|negotiation| {
                let thread = &negotiation.thread;
                let escalation = thread.escalation.as_deref();
                let decision = escalation.and_then(|escalation| escalation.decision.as_ref());
                vec![
                    thread.id.to_string(),
                    thread.kind.as_str().to_owned(),
                    thread.status.as_str().to_owned(),
                    thread.rounds.to_string(),
                    negotiation.bids.last().map(|bid| truncate(&timeline::offer(bid), 40)).unwrap_or_default(),
                    match (escalation, decision) {
                        (_, Some(decision)) => format!("decided {}", price(decision.amount)),
                        (Some(_), None) => "escalated".to_owned(),
                        (None, None) => String::new(),
                    },
                ]
            })
            .collect::<Vec<_>>();
        print!("{}", table(&["NEGOTIATION", "KIND", "STATUS", "ROUNDS", "LAST OFFER", "OPERATOR"], &rows, &[3]));
    }
    println!();
    let rows = timeline::order_timeline(order, &read.payments, &negotiations)
        .into_iter()
        .map(|moment| {
            vec![moment.at.format("%Y-%m-%d %H:%M:%S").to_string(), moment.what, truncate(&moment.detail, 90)]
        })
        .collect::<Vec<_>>();
    print!("{}", table(&["WHEN (UTC)", "WHAT", ""], &rows, &[]));
    Ok(())
}

/// Every negotiation on the order, oldest first, each with its bids.
async fn negotiations_of(client: &haggle_client::Client, order: Uuid) -> anyhow::Result<Vec<ThreadWithBids>> {
    let mut threads = Vec::new();
    let mut cursor = None;
    loop {
        let query = ThreadQuery { order_id: Some(order), limit: Some(200), cursor, ..ThreadQuery::default() };
        let page = client.list_threads(&query).await?;
        threads.extend(page.data);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    threads.sort_by_key(|thread| thread.id);
    let mut negotiations = Vec::with_capacity(threads.len());
    for thread in threads {
        negotiations.push(client.get_thread(thread.id).await?);
    }
    Ok(negotiations)
}

pub async fn listings(args: ListingsArgs) -> anyhow::Result<()> {
    let client = args.server.keyed_client("listings")?;
    let query = ListingQuery {
        seller_id: args.seller,
        status: args.status,
        q: args.q.clone(),
        limit: Some(args.page.limit),
        cursor: args.page.cursor,
    };
    let page = client.list_listings(&query).await?;
    if args.page.json {
        println!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(());
    }
    let rows = page
        .data
        .iter()
        .map(|listing| {
            vec![
                listing.id.to_string(),
                truncate(&listing.title, 32),
                Price::new(listing.ask_amount, listing.currency).to_string(),
                listing.status.as_str().to_owned(),
                if listing.negotiable { "yes" } else { "no" }.to_owned(),
                listing.seller_id.to_string(),
            ]
        })
        .collect::<Vec<_>>();
    print!("{}", table(&["ID", "TITLE", "ASK", "STATUS", "NEGOTIABLE", "SELLER"], &rows, &[2]));
    more(page.next_cursor);
    Ok(())
}

pub async fn threads(args: ThreadsArgs) -> anyhow::Result<()> {
    let client = args.server.keyed_client("threads")?;
    let query = ThreadQuery {
        role: args.role,
        status: args.status,
        listing_id: args.listing,
        order_id: None,
        kind: None,
        limit: Some(args.page.limit),
        cursor: args.page.cursor,
    };
    let page = client.list_threads(&query).await?;
    if args.page.json {
        println!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(());
    }
    let me = client.me().await?;
    let mut rows = Vec::with_capacity(page.data.len());
    for thread in &page.data {
        let last = client.get_bid(thread.last_bid_id, None).await?;
        let role = if thread.buyer_id == me.id { Party::Buyer } else { Party::Seller };
        let turn = match thread.turn {
            Some(party) if party == role => "me",
            Some(_) => "them",
            None => "-",
        };
        rows.push(vec![
            thread.id.to_string(),
            thread.listing_id.to_string(),
            role.as_str().to_owned(),
            thread.status.as_str().to_owned(),
            thread.rounds.to_string(),
            Price::new(last.amount, last.currency).to_string(),
            format!("{}{}", last.author.as_str(), if last.is_final { " (final)" } else { "" }),
            turn.to_owned(),
        ]);
    }
    print!("{}", table(&["ID", "LISTING", "ROLE", "STATUS", "ROUNDS", "LAST", "BY", "TO MOVE"], &rows, &[4, 5]));
    more(page.next_cursor);
    Ok(())
}

fn more(next: Option<Uuid>) {
    if let Some(cursor) = next {
        eprintln!("more: --cursor {cursor}");
    }
}

fn truncate(text: &str, max: usize) -> String {
    let clean: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if clean.chars().count() <= max {
        clean
    } else {
        clean.chars().take(max - 1).chain(std::iter::once('…')).collect()
    }
}

/// A plain table: a header line and one line per row, columns padded to their widest cell;
/// the columns in `right` are aligned right.
fn table(headers: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                let pad = " ".repeat(widths[i].saturating_sub(cell.chars().count()));
                if right.contains(&i) { format!("{pad}{cell}") } else { format!("{cell}{pad}") }
            })
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_columns_and_align_amounts_right() {
        let rows = vec![vec!["a".to_owned(), "1.00".to_owned()], vec!["bbb".to_owned(), "1,000.00".to_owned()]];
        let text = table(&["ID", "ASK"], &rows, &[1]);
        assert_eq!(text, "ID        ASK\na        1.00\nbbb  1,000.00\n");
        assert_eq!(truncate("a\nlong title", 6), "a lon…");
    }
}
