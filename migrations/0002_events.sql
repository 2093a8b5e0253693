-- Events and webhooks.
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

-- Who may see which event: one row per agent concerned, read by (agent, id) range.
CREATE TABLE event_recipients (
    agent_id uuid NOT NULL,
    event_id bigint NOT NULL REFERENCES events (id) ON DELETE CASCADE,
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
    events          text[] NOT NULL CHECK (cardinality(events) >= 1),
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
