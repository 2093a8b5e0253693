-- Haggle's marketplace: agents and their keys, listings, threads of bids, orders, and the
-- idempotency record. The schema is the last line of defence: every status has a CHECK, every
-- relation a foreign key, and the invariants of the state machine have unique indexes.

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
);
-- One ACTIVE thread per buyer and listing.
CREATE UNIQUE INDEX threads_one_active_per_buyer ON threads (listing_id, buyer_id) WHERE status = 'ACTIVE';
CREATE INDEX threads_listing_buyer_idx ON threads (listing_id, buyer_id);
CREATE INDEX threads_buyer_id_idx ON threads (buyer_id, id DESC);
CREATE INDEX threads_seller_id_idx ON threads (seller_id, id DESC);
CREATE INDEX threads_due_idx ON threads (expires_at) WHERE status = 'ACTIVE';

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
    PRIMARY KEY (agent_id, key_digest)
);
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);
