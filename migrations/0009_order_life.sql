-- An order's life after the handshake, and its payments.
--
-- The seller fulfils a CONFIRMED order (FULFILLED, with an optional reference and note), the
-- buyer completes it, or the server does once it has been fulfilled long enough (COMPLETED).
-- Money moves outside Haggle, so payments are a ledger: the buyer records one (RECORDED), the
-- seller confirms it (CONFIRMED) or disputes it (DISPUTED). The order keeps the confirmed sum,
-- `paid_amount`, which can never pass the order's amount.

ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders
    ADD CONSTRAINT orders_status_check CHECK (status IN ('CONFIRMED', 'FULFILLED', 'COMPLETED')),
    ADD COLUMN paid_amount          bigint NOT NULL DEFAULT 0,
    ADD COLUMN fulfilled_at         timestamptz,
    ADD COLUMN fulfilment_reference text CHECK (char_length(fulfilment_reference) BETWEEN 1 AND 200),
    ADD COLUMN fulfilment_note      text CHECK (char_length(fulfilment_note) <= 500),
    ADD COLUMN completed_at         timestamptz,
    ADD CONSTRAINT orders_paid_within_amount CHECK (paid_amount BETWEEN 0 AND amount),
    ADD CONSTRAINT orders_fulfilled_when CHECK ((fulfilled_at IS NOT NULL) = (status IN ('FULFILLED', 'COMPLETED'))),
    ADD CONSTRAINT orders_completed_when CHECK ((completed_at IS NOT NULL) = (status = 'COMPLETED')),
    ADD CONSTRAINT orders_fulfilment_when_fulfilled CHECK (
        fulfilled_at IS NOT NULL OR (fulfilment_reference IS NULL AND fulfilment_note IS NULL));
-- The sweeper completes fulfilled orders the buyer left alone, oldest fulfilment first.
CREATE INDEX orders_fulfilled_due_idx ON orders (fulfilled_at) WHERE status = 'FULFILLED';

CREATE TABLE payments (
    id             uuid PRIMARY KEY,
    order_id       uuid NOT NULL REFERENCES orders (id),
    payer_id       uuid NOT NULL REFERENCES agents (id),
    amount         bigint NOT NULL CHECK (amount >= 100),
    currency       text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    reference      text NOT NULL CHECK (char_length(reference) BETWEEN 1 AND 200),
    status         text NOT NULL CHECK (status IN ('RECORDED', 'CONFIRMED', 'DISPUTED')),
    dispute_reason text CHECK (char_length(dispute_reason) BETWEEN 1 AND 500),
    answered_at    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT payments_answered_unless_recorded CHECK ((status = 'RECORDED') = (answered_at IS NULL)),
    CONSTRAINT payments_reason_when_disputed CHECK ((status = 'DISPUTED') = (dispute_reason IS NOT NULL))
);
CREATE INDEX payments_order_id_idx ON payments (order_id, id);

ALTER TABLE outbox DROP CONSTRAINT outbox_type_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_type_check CHECK (type IN (
    'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'order.fulfilled', 'order.completed',
    'payment.recorded', 'payment.confirmed', 'payment.disputed', 'listing.sold', 'listing.withdrawn',
    'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled'));

ALTER TABLE events DROP CONSTRAINT events_type_check;
ALTER TABLE events ADD CONSTRAINT events_type_check CHECK (type IN (
    'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'order.fulfilled', 'order.completed',
    'payment.recorded', 'payment.confirmed', 'payment.disputed', 'listing.sold', 'listing.withdrawn',
    'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled'));

ALTER TABLE webhooks DROP CONSTRAINT webhooks_events_known;
ALTER TABLE webhooks ADD CONSTRAINT webhooks_events_known CHECK (events <@ ARRAY[
    '*', 'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'order.fulfilled', 'order.completed',
    'payment.recorded', 'payment.confirmed', 'payment.disputed', 'listing.sold', 'listing.withdrawn',
    'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled']);
