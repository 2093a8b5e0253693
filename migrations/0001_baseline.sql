-- Haggle's schema, as a baseline: the marketplace (agents and their keys, listings, threads of
-- bids, orders, the idempotency record), events and webhooks, and auto-negotiation. The schema is
-- the last line of defence: every status, reason and kind has a CHECK, every relation a foreign
-- key, and the invariants of the state machine have unique indexes.
--
-- Migrations are frozen once committed: a change is a new numbered file (a test compares every
-- committed file's checksum).

-- The marketplace -----------------------------------------------------------------------------

CREATE TABLE agents (
    id            uuid PRIMARY KEY,
    name          text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 100),
    tier          text NOT NULL DEFAULT 'PUBLIC' CHECK (tier IN ('PUBLIC', 'SEAT', 'AGENCY', 'ADVERTISER')),
    agency_id     text CHECK (char_length(agency_id) BETWEEN 1 AND 200),
    advertiser_id text CHECK (char_length(advertiser_id) BETWEEN 1 AND 200),
    seat_id       text CHECK (char_length(seat_id) BETWEEN 1 AND 200),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- API keys are stored only as their SHA-256 digest.
CREATE TABLE api_keys (
    id         uuid PRIMARY KEY,
    agent_id   uuid NOT NULL REFERENCES agents (id),
    digest     bytea NOT NULL CHECK (octet_length(digest) = 32),
    prefix     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    CONSTRAINT api_keys_digest_key UNIQUE (digest)
);
CREATE INDEX api_keys_agent_id_idx ON api_keys (agent_id, id);

CREATE TABLE listings (
    id                    uuid PRIMARY KEY,
    seller_id             uuid NOT NULL REFERENCES agents (id),
    title                 text NOT NULL CHECK (char_length(title) BETWEEN 1 AND 200),
    description           text NOT NULL DEFAULT '' CHECK (char_length(description) <= 5000),
    ask_amount            bigint NOT NULL CHECK (ask_amount >= 100),
    currency              text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    quantity              integer NOT NULL CHECK (quantity >= 1),
    quantity_available    integer NOT NULL CHECK (quantity_available BETWEEN 0 AND quantity),
    status                text NOT NULL CHECK (status IN ('ACTIVE', 'SOLD', 'WITHDRAWN')),
    negotiable            boolean NOT NULL,
    min_negotiation_tier  text NOT NULL CHECK (min_negotiation_tier IN ('PUBLIC', 'SEAT', 'AGENCY', 'ADVERTISER')),
    max_rounds            integer NOT NULL CHECK (max_rounds BETWEEN 1 AND 100),
    bid_ttl_seconds       integer NOT NULL CHECK (bid_ttl_seconds BETWEEN 60 AND 2592000),
    max_threads_per_buyer integer NOT NULL CHECK (max_threads_per_buyer BETWEEN 1 AND 100),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    -- A listing is SOLD exactly when nothing is left; an ACTIVE one always has a unit to sell.
    CONSTRAINT listings_sold_when_empty CHECK ((status = 'SOLD') = (quantity_available = 0))
);
CREATE INDEX listings_seller_id_idx ON listings (seller_id, id DESC);
CREATE INDEX listings_status_idx ON listings (status, id DESC);

CREATE TABLE threads (
    id            uuid PRIMARY KEY,
    listing_id    uuid NOT NULL REFERENCES listings (id),
    buyer_id      uuid NOT NULL REFERENCES agents (id),
    seller_id     uuid NOT NULL REFERENCES agents (id),
    status        text NOT NULL CHECK (status IN ('ACTIVE', 'ACCEPTED', 'REJECTED', 'EXPIRED', 'CLOSED')),
    rounds        integer NOT NULL CHECK (rounds >= 1),
    -- The latest bid; while ACTIVE it is the PENDING one and expires_at is its deadline.
    last_bid_id   uuid NOT NULL,
    expires_at    timestamptz,
    closed_reason text CHECK (closed_reason IN ('accepted', 'rejected', 'withdrawn', 'expired', 'listing_sold', 'listing_withdrawn')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT threads_parties_differ CHECK (buyer_id <> seller_id),
    CONSTRAINT threads_deadline_while_active CHECK ((status = 'ACTIVE') = (expires_at IS NOT NULL)),
    CONSTRAINT threads_reason_when_ended CHECK ((status = 'ACTIVE') = (closed_reason IS NULL))
)
-- A counter moves its thread on (rounds, last bid, deadline) without touching an indexed column,
-- so the thread's new version can stay on its page with no new index entries (a HOT update),
-- given room on the page.
WITH (fillfactor = 80);
-- One ACTIVE thread per buyer and listing.
CREATE UNIQUE INDEX threads_one_active_per_buyer ON threads (listing_id, buyer_id) WHERE status = 'ACTIVE';
CREATE INDEX threads_listing_buyer_idx ON threads (listing_id, buyer_id);
CREATE INDEX threads_buyer_id_idx ON threads (buyer_id, id DESC);
CREATE INDEX threads_seller_id_idx ON threads (seller_id, id DESC);

CREATE TABLE bids (
    id            uuid PRIMARY KEY,
    thread_id     uuid NOT NULL REFERENCES threads (id),
    author        text NOT NULL CHECK (author IN ('buyer', 'seller')),
    author_id     uuid NOT NULL REFERENCES agents (id),
    amount        bigint NOT NULL CHECK (amount >= 100),
    currency      text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    message       text CHECK (char_length(message) <= 500),
    terms         jsonb CHECK (terms IS NULL OR jsonb_typeof(terms) = 'object'),
    final         boolean NOT NULL,
    status        text NOT NULL CHECK (status IN ('PENDING', 'COUNTERED', 'ACCEPTED', 'REJECTED', 'EXPIRED')),
    reason        text CHECK (reason IN ('countered', 'accepted', 'rejected', 'withdrawn', 'expired', 'listing_sold', 'listing_withdrawn')),
    parent_bid_id uuid REFERENCES bids (id),
    round         integer NOT NULL CHECK (round >= 1),
    expires_at    timestamptz NOT NULL,
    responded_at  timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    -- The buyer authors the odd rounds, the seller the even ones.
    CONSTRAINT bids_author_alternates CHECK ((author = 'buyer') = (round % 2 = 1)),
    CONSTRAINT bids_opening_has_no_parent CHECK ((round = 1) = (parent_bid_id IS NULL)),
    CONSTRAINT bids_answered_unless_pending CHECK ((status = 'PENDING') = (responded_at IS NULL)),
    CONSTRAINT bids_reason_unless_pending CHECK ((status = 'PENDING') = (reason IS NULL)),
    -- One bid per round: two racing counters can never both add a bid.
    CONSTRAINT bids_thread_round_key UNIQUE (thread_id, round)
);
-- At most one PENDING bid per thread.
CREATE UNIQUE INDEX bids_one_pending_per_thread ON bids (thread_id) WHERE status = 'PENDING';
-- The sweeper finds due negotiations through their pending bids: a live thread's deadline is
-- its pending bid's.
CREATE INDEX bids_due_idx ON bids (expires_at) WHERE status = 'PENDING';

ALTER TABLE threads
    ADD CONSTRAINT threads_last_bid_id_fkey FOREIGN KEY (last_bid_id) REFERENCES bids (id)
    DEFERRABLE INITIALLY DEFERRED;

CREATE TABLE orders (
    id         uuid PRIMARY KEY,
    listing_id uuid NOT NULL REFERENCES listings (id),
    thread_id  uuid REFERENCES threads (id),
    bid_id     uuid REFERENCES bids (id),
    buyer_id   uuid NOT NULL REFERENCES agents (id),
    seller_id  uuid NOT NULL REFERENCES agents (id),
    amount     bigint NOT NULL CHECK (amount >= 100),
    currency   text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    terms      jsonb CHECK (terms IS NULL OR jsonb_typeof(terms) = 'object'),
    status     text NOT NULL CHECK (status IN ('CONFIRMED')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- A purchase has neither; an accepted bid has both.
    CONSTRAINT orders_thread_with_bid CHECK ((thread_id IS NULL) = (bid_id IS NULL)),
    CONSTRAINT orders_parties_differ CHECK (buyer_id <> seller_id),
    -- Never a second order for one bid or one thread.
    CONSTRAINT orders_bid_id_key UNIQUE (bid_id),
    CONSTRAINT orders_thread_id_key UNIQUE (thread_id)
);
CREATE INDEX orders_buyer_id_idx ON orders (buyer_id, id DESC);
CREATE INDEX orders_seller_id_idx ON orders (seller_id, id DESC);
CREATE INDEX orders_listing_id_idx ON orders (listing_id);

-- The first response to each (agent, Idempotency-Key), kept for 24 hours. Only digests of the
-- key are stored; a response that carries a secret is sealed with a key derived from the
-- Idempotency-Key itself, so the table alone never reveals it.
CREATE TABLE idempotency_keys (
    agent_id       uuid NOT NULL,
    key_digest     bytea NOT NULL CHECK (octet_length(key_digest) = 32),
    request_digest bytea NOT NULL CHECK (octet_length(request_digest) = 32),
    status_code    smallint NOT NULL CHECK (status_code BETWEEN 200 AND 499),
    content_type   text NOT NULL,
    body           bytea NOT NULL,
    sealed         boolean NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    -- A stored answer that its request may still replace: the compatibility routes commit the
    -- buyer's move, then wait for the seller's answer and store the complete answer. Until then
    -- a retry is told the first request is still running.
    in_progress    boolean NOT NULL DEFAULT false,
    PRIMARY KEY (agent_id, key_digest)
);
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);

-- Events and webhooks -------------------------------------------------------------------------
--
-- A state change writes its events to `outbox` in its own transaction. A publisher then moves
-- committed outbox rows into `events`, numbering them in the order it publishes them, so that
-- an event id is never taken by a transaction that commits after a reader has passed it: readers
-- see ids 1..n appear with no gaps. Publishing also fans each event out to the inboxes of the
-- agents it concerns and queues a delivery for each matching webhook, in the same transaction.

CREATE TABLE outbox (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Checked here as well as in events, so that a bad row fails its own transaction instead
    -- of every later publication.
    type       text NOT NULL CHECK (type IN (
                   'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
                   'thread.closed', 'order.created', 'listing.sold', 'listing.withdrawn',
                   'negotiation.action_required', 'webhook.disabled')),
    audience   uuid[] NOT NULL CHECK (cardinality(audience) >= 1),
    listing_id uuid,
    thread_id  uuid,
    bid_id     uuid,
    order_id   uuid,
    data       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The last event id handed out; its row lock serialises publishers.
CREATE TABLE event_sequence (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    last_id   bigint NOT NULL
);
INSERT INTO event_sequence (last_id) VALUES (0);

CREATE TABLE events (
    id         bigint PRIMARY KEY,
    type       text NOT NULL CHECK (type IN (
                   'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
                   'thread.closed', 'order.created', 'listing.sold', 'listing.withdrawn',
                   'negotiation.action_required', 'webhook.disabled')),
    audience   uuid[] NOT NULL,
    listing_id uuid,
    thread_id  uuid,
    bid_id     uuid,
    order_id   uuid,
    data       jsonb NOT NULL,
    created_at timestamptz NOT NULL
);
-- Events older than the retention are purged, oldest first.
CREATE INDEX events_created_at_idx ON events (created_at);

-- Who may see which event: one row per agent concerned, read by (agent, id) range. Written by
-- the statement that publishes their event and deleted with it when it is purged, so no
-- foreign key checks each row as it is written.
CREATE TABLE event_recipients (
    agent_id uuid NOT NULL,
    event_id bigint NOT NULL,
    PRIMARY KEY (agent_id, event_id)
);
CREATE INDEX event_recipients_event_id_idx ON event_recipients (event_id);

-- A webhook's signing secret is stored encrypted under the server's key (never in clear and
-- never hashed, since signing needs it).
CREATE TABLE webhooks (
    id              uuid PRIMARY KEY,
    agent_id        uuid NOT NULL REFERENCES agents (id),
    url             text NOT NULL CHECK (char_length(url) BETWEEN 1 AND 2048),
    -- Event types delivered; '*' is every type.
    events          text[] NOT NULL CHECK (cardinality(events) >= 1)
                    CONSTRAINT webhooks_events_known CHECK (events <@ ARRAY[
                        '*', 'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
                        'thread.closed', 'order.created', 'listing.sold', 'listing.withdrawn',
                        'negotiation.action_required', 'webhook.disabled']),
    secret_sealed   bytea NOT NULL,
    secret_prefix   text NOT NULL,
    status          text NOT NULL DEFAULT 'ACTIVE' CHECK (status IN ('ACTIVE', 'DISABLED')),
    disabled_reason text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhooks_reason_when_disabled CHECK ((status = 'DISABLED') = (disabled_reason IS NOT NULL))
);
CREATE INDEX webhooks_agent_id_idx ON webhooks (agent_id, id DESC);

-- One delivery per (webhook, event), retried until it succeeds or its schedule runs out.
CREATE TABLE webhook_deliveries (
    id              uuid PRIMARY KEY,
    webhook_id      uuid NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id        bigint NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    status          text NOT NULL CHECK (status IN ('PENDING', 'SUCCEEDED', 'FAILED')),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- While PENDING: when the next attempt is due (a worker holding it pushes this forward);
    -- none while its webhook is disabled.
    next_attempt_at timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhook_deliveries_due_only_while_pending CHECK (status = 'PENDING' OR next_attempt_at IS NULL),
    CONSTRAINT webhook_deliveries_once UNIQUE (webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX webhook_deliveries_webhook_idx ON webhook_deliveries (webhook_id, event_id DESC);
CREATE INDEX webhook_deliveries_event_id_idx ON webhook_deliveries (event_id);

-- Every attempt, kept for the owner to read.
CREATE TABLE webhook_attempts (
    delivery_id     uuid NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt         integer NOT NULL CHECK (attempt >= 1),
    started_at      timestamptz NOT NULL,
    duration_ms     integer NOT NULL CHECK (duration_ms >= 0),
    response_status integer,
    error           text,
    PRIMARY KEY (delivery_id, attempt)
);

-- Keys the server generates for itself when the operator gives none (the webhook sealing key).
CREATE TABLE server_keys (
    name       text PRIMARY KEY,
    key        bytea NOT NULL CHECK (octet_length(key) = 32),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Auto-negotiation ----------------------------------------------------------------------------
--
-- The policies agents set, the decisions waiting to be made for them, and a
-- log of the decisions made.
--
-- A bid that waits for an agent with a policy gets a task in `auto_tasks`, written in the
-- transaction that makes the bid, with its event (`covering_policies` below is the rule). An executor on any
-- instance locks a waiting task with FOR UPDATE SKIP LOCKED, decides, acts through the bid
-- state machine and marks the task done, all in one transaction: a crash before the commit
-- leaves the task waiting for the next executor, and the state machine's compare-and-set lets
-- only one answer to a bid through. A done task stays for an hour; a policy set by its owner
-- on a bid it had stopped on re-arms it.

-- A policy applies to one agent in one role: its default for the role, or an override for one
-- listing or one thread. The most specific one wins: thread, then listing, then the default.
CREATE TABLE policies (
    id         uuid PRIMARY KEY,
    agent_id   uuid NOT NULL REFERENCES agents (id),
    role       text NOT NULL CHECK (role IN ('buyer', 'seller')),
    listing_id uuid REFERENCES listings (id),
    thread_id  uuid REFERENCES threads (id),
    policy     jsonb NOT NULL CHECK (jsonb_typeof(policy) = 'object'),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT policies_one_scope CHECK (listing_id IS NULL OR thread_id IS NULL)
);
CREATE UNIQUE INDEX policies_agent_default ON policies (agent_id, role) WHERE listing_id IS NULL AND thread_id IS NULL;
CREATE UNIQUE INDEX policies_listing ON policies (agent_id, listing_id) WHERE listing_id IS NOT NULL;
CREATE UNIQUE INDEX policies_thread ON policies (agent_id, thread_id) WHERE thread_id IS NOT NULL;

-- A pending bid that a policy is to answer, for `agent_id` (the responder).
CREATE TABLE auto_tasks (
    bid_id     uuid PRIMARY KEY REFERENCES bids (id) ON DELETE CASCADE,
    thread_id  uuid NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    agent_id   uuid NOT NULL REFERENCES agents (id),
    due_at     timestamptz NOT NULL DEFAULT now(),
    attempts   integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- Set when a decision on the bid committed (or the executor gave up on it).
    done_at    timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX auto_tasks_due_idx ON auto_tasks (due_at) WHERE done_at IS NULL;

CREATE INDEX auto_tasks_done_idx ON auto_tasks (done_at) WHERE done_at IS NOT NULL;

-- Every decision an executor made. A bid is answered at most once (the unique index; the state
-- machine enforces it as well); a stop may be decided again after the owner changes its policy.
CREATE TABLE auto_decisions (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bid_id     uuid NOT NULL REFERENCES bids (id) ON DELETE CASCADE,
    thread_id  uuid NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    agent_id   uuid NOT NULL REFERENCES agents (id),
    action     text NOT NULL CHECK (action IN ('accept', 'counter', 'reject', 'stop')),
    -- Why, as a stable code, for the owner only: it can tell which private limit was met.
    reason     text NOT NULL,
    -- A sentence the counterparty may read (for a stop, the owner's sentence: stops are private).
    rationale  text NOT NULL,
    -- The counter the decision made, when it made one.
    counter_bid_id uuid REFERENCES bids (id) ON DELETE CASCADE,
    decided_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT auto_decisions_counter_has_bid CHECK ((action = 'counter') = (counter_bid_id IS NOT NULL))
);
CREATE UNIQUE INDEX auto_decisions_one_answer_per_bid ON auto_decisions (bid_id) WHERE action <> 'stop';
CREATE INDEX auto_decisions_thread_idx ON auto_decisions (thread_id, agent_id);
CREATE INDEX auto_decisions_decided_at_idx ON auto_decisions (decided_at);

-- Which pending bids a policy answers, said once: the policies with which `agent`, answering in
-- `role`, covers a thread (for the thread, its listing, or the role). Every statement that
-- queues tasks asks it. A SQL function returning rows and used in FROM is inlined into the
-- statement that calls it, like a view.
CREATE FUNCTION covering_policies(agent uuid, answering_role text, listing uuid, thread uuid)
RETURNS SETOF policies LANGUAGE sql STABLE AS $$
    SELECT * FROM policies p
    WHERE p.agent_id = agent
      AND (p.thread_id = thread OR p.listing_id = listing
           OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = answering_role))
$$;
