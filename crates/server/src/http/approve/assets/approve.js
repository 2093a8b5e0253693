// The approval page: reads the agent's pending requests from /approve/requests every few
// seconds (each read authorised by the session) and draws each with its listing, its thread's
// price ladder, what the move commits to and when it expires, and the approve, approve with a
// budget and deny forms, which post to this server. Nothing here holds the approver's token.
"use strict";

const POLL_MS = 2000;
let shown = new Set();
let first = true;

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value !== undefined && value !== null) node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const EXPONENTS = { JPY: 0, KRW: 0, BHD: 3, KWD: 3, OMR: 3, JOD: 3, TND: 3 };

function money(amount, currency) {
  const exponent = EXPONENTS[currency] ?? 2;
  const value = (amount / Math.pow(10, exponent)).toLocaleString("en-US", {
    minimumFractionDigits: exponent, maximumFractionDigits: exponent,
  });
  return `${value} ${currency}`;
}

function when(iso) {
  const date = new Date(iso);
  const minutes = Math.round((date - Date.now()) / 60000);
  const left = minutes >= 120 ? `in ${Math.round(minutes / 60)} h` : minutes > 0 ? `in ${minutes} min` : "now";
  return `${date.toLocaleString()} (${left})`;
}

function commits(held) {
  const price = money(held.amount, held.currency);
  const final = held.final ? ", as a final offer" : "";
  switch (held.move) {
    case "place": return `Open a negotiation as ${held.party}, bidding ${price}${final}`;
    case "counter": return `Counter as ${held.party} at ${price}${final}`;
    case "accept": return `Accept the other side's bid as ${held.party}: a deal at ${price}`;
    case "purchase": return `Buy one unit at the ask: ${price}`;
    default: return `${held.move} at ${price}`;
  }
}

function ladder(bids) {
  if (!bids.length) return el("p", { class: "muted" }, "No bids yet: this move would open the thread.");
  const rows = bids.map((bid) => el("tr", {},
    el("td", {}, bid.round), el("td", {}, bid.author), el("td", {}, money(bid.amount, bid.currency)),
    el("td", {}, bid.status), el("td", {}, bid.final ? "final" : "")));
  return el("table", { class: "ladder" },
    el("thead", {}, el("tr", {}, el("th", {}, "Round"), el("th", {}, "By"), el("th", {}, "Amount"),
      el("th", {}, "Status"), el("th", {}, ""))),
    el("tbody", {}, ...rows));
}

function forms(approval) {
  const base = `/approve/requests/${approval.id}`;
  const held = approval.move;
  const approve = el("form", { method: "post", action: `${base}/approve`, class: "approve" },
    el("label", {}, "Note", el("input", { name: "note", maxlength: "500", placeholder: "optional" })),
    el("button", { type: "submit", class: "good" }, "Approve"));
  const hint = held.party === "buyer" ? "highest amount" : "lowest amount";
  const budget = el("form", { method: "post", action: `${base}/approve`, class: "approve-budget" },
    el("label", {}, `Budget (${hint}, minor units)`,
      el("input", { name: "budget_amount", type: "number", required: "", value: String(held.amount) })),
    el("label", {}, "For hours", el("input", { name: "budget_hours", type: "number", min: "1", max: "720", value: "24" })),
    el("label", {}, "On",
      el("select", { name: "budget_scope" },
        el("option", { value: "thread" }, "this thread"), el("option", { value: "listing" }, "this listing"))),
    el("button", { type: "submit" }, "Approve with budget"));
  const deny = el("form", { method: "post", action: `${base}/deny`, class: "deny" },
    el("label", {}, "Why", el("input", { name: "note", maxlength: "500", placeholder: "optional" })),
    el("button", { type: "submit", class: "danger" }, "Deny"));
  return el("div", { class: "answers" }, approve, budget, deny);
}

function card(item, fresh) {
  const { approval, listing } = item;
  const held = approval.move;
  const title = listing ? `${listing.title}` : `Listing ${held.listing_id}`;
  const ask = listing ? `ask ${money(listing.ask_amount, listing.currency)}, ${listing.quantity_available} left, ${listing.status}` : "";
  return el("section", { class: `card request${fresh ? " fresh" : ""}`, "data-id": approval.id },
    el("h2", {}, title),
    el("div", { class: "meta" }, ask),
    el("p", { class: "commits" }, commits(held)),
    held.message ? el("p", {}, `Message: “${held.message}”`) : null,
    el("p", { class: "meta" }, `Expires ${when(approval.expires_at)} · request `, el("code", {}, approval.id),
      ` · move hash `, el("code", {}, approval.move_hash.slice(0, 16) + "…")),
    ladder(item.ladder),
    forms(approval));
}

function notice(answered, refused) {
  const box = document.getElementById("answered");
  if (!answered && !refused) return;
  let words;
  if (refused) {
    words = `Request ${answered ? answered.id : ""} was not answered: ${refused}.`;
    box.classList.add("bad");
  } else if (answered.status === "APPROVED") {
    const made = answered.order_id ? ` (order ${answered.order_id})` : answered.bid_id ? ` (bid ${answered.bid_id})` : "";
    words = `Approved: the ${answered.move.move} of ${money(answered.move.amount, answered.move.currency)} was made${made}.`;
  } else if (answered.status === "FAILED" && answered.failure) {
    words = `Approved, but the move could not be made (${answered.failure.code}): ${answered.failure.detail}`;
    box.classList.add("bad");
  } else {
    words = `Request ${answered.id} is ${answered.status}.`;
  }
  box.textContent = words;
  box.dataset.status = refused ? "REFUSED" : answered.status;
  box.hidden = false;
}

async function poll() {
  const live = document.getElementById("live");
  const params = new URLSearchParams(location.search);
  const query = first && params.get("answered") ? `?answered=${encodeURIComponent(params.get("answered"))}` : "";
  try {
    const response = await fetch(`/approve/requests${query}`, { credentials: "same-origin", cache: "no-store" });
    if (response.status === 401) {
      location.assign("/approve");
      return;
    }
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const body = await response.json();
    if (first) notice(body.answered, params.get("refused"));
    const list = document.getElementById("requests");
    const ids = new Set(body.pending.map((item) => item.approval.id));
    const changed = ids.size !== shown.size || [...ids].some((id) => !shown.has(id));
    if (changed) {
      list.replaceChildren(...body.pending.map((item) => card(item, !first && !shown.has(item.approval.id))));
      shown = ids;
    }
    document.getElementById("count").textContent = String(body.pending.length);
    document.getElementById("none").hidden = body.pending.length > 0;
    live.className = "live on";
    live.textContent = "live";
    first = false;
  } catch (error) {
    live.className = "live off";
    live.textContent = "reconnecting";
  }
  setTimeout(poll, POLL_MS);
}

document.addEventListener("DOMContentLoaded", poll);
