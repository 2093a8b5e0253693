-- Negotiations on an order: a refund the buyer asks for, and the order's cancellation.
--
-- A thread has a kind: `price` (every thread before this one, on a listing) or, on an order
-- (`order_id`), `refund` or `cancel`. An order thread keeps its order's listing, whose round
-- limit and bids' lifetime it follows, but it is no negotiation on the listing: the listing's
-- one live thread per buyer, its limit of threads per buyer and the threads a sold-out listing
-- ends are its price threads only. One thread of each kind is open on an order at a time.
--
-- A bid carries its thread's kind; a cancellation's bids name no amount (NULL). An accepted
-- refund adds to the order's `refunded_amount`, which never passes what was paid; an accepted
-- cancellation makes the order CANCELLED. A refund that ended without agreement can be
-- escalated to the operator, who decides an amount with a note.

ALTER TABLE threads
    ADD COLUMN kind           text NOT NULL DEFAULT 'price' CHECK (kind IN ('price', 'refund', 'cancel')),
    ADD COLUMN order_id       uuid REFERENCES orders (id),
    -- Who made the first bid: the buyer on a listing; either party may ask to cancel an order.
    ADD COLUMN opened_by      text NOT NULL DEFAULT 'buyer' CHECK (opened_by IN ('buyer', 'seller')),
    ADD COLUMN escalated_at   timestamptz,
    ADD COLUMN escalated_by   uuid REFERENCES agents (id),
    ADD COLUMN decided_amount bigint CHECK (decided_amount >= 0),
    ADD COLUMN decision_note  text CHECK (char_length(decision_note) BETWEEN 1 AND 500),
    ADD COLUMN decided_at     timestamptz,
    ADD CONSTRAINT threads_order_unless_price CHECK ((kind = 'price') = (order_id IS NULL)),
    ADD CONSTRAINT threads_buyer_opens_prices CHECK (kind <> 'price' OR opened_by = 'buyer'),
    ADD CONSTRAINT threads_escalated_refunds CHECK (escalated_at IS NULL OR kind = 'refund'),
    ADD CONSTRAINT threads_escalated_by_when CHECK ((escalated_at IS NULL) = (escalated_by IS NULL)),
    ADD CONSTRAINT threads_decided_when_escalated CHECK (decided_at IS NULL OR escalated_at IS NOT NULL),
    ADD CONSTRAINT threads_decision_whole CHECK (
        (decided_at IS NULL) = (decided_amount IS NULL) AND (decided_at IS NULL) = (decision_note IS NULL));

-- The buyer's one live price thread per listing; the placement's ON CONFLICT names this
-- predicate.
DROP INDEX threads_one_active_per_buyer;
CREATE UNIQUE INDEX threads_one_active_per_buyer ON threads (listing_id, buyer_id)
    WHERE status = 'ACTIVE' AND kind = 'price';
-- One open thread per order and kind.
CREATE UNIQUE INDEX threads_one_open_per_order_kind ON threads (order_id, kind)
    WHERE status = 'ACTIVE' AND order_id IS NOT NULL;
CREATE INDEX threads_order_id_idx ON threads (order_id, id) WHERE order_id IS NOT NULL;
-- The operator's escalated refunds still to decide.
CREATE INDEX threads_escalated_idx ON threads (escalated_at) WHERE escalated_at IS NOT NULL AND decided_at IS NULL;

-- On a listing the buyer authors the odd rounds; on an order, whoever opened does.
ALTER TABLE bids DROP CONSTRAINT bids_author_alternates;
ALTER TABLE bids
    ADD COLUMN kind text NOT NULL DEFAULT 'price' CHECK (kind IN ('price', 'refund', 'cancel')),
    ALTER COLUMN amount DROP NOT NULL,
    ADD CONSTRAINT bids_author_alternates CHECK (kind <> 'price' OR (author = 'buyer') = (round % 2 = 1)),
    ADD CONSTRAINT bids_amount_unless_cancel CHECK ((amount IS NULL) = (kind = 'cancel'));

ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders
    ADD CONSTRAINT orders_status_check CHECK (status IN ('CONFIRMED', 'FULFILLED', 'COMPLETED', 'CANCELLED')),
    ADD COLUMN refunded_amount bigint NOT NULL DEFAULT 0,
    ADD COLUMN cancelled_at    timestamptz,
    ADD CONSTRAINT orders_refunded_within_paid CHECK (refunded_amount BETWEEN 0 AND paid_amount),
    ADD CONSTRAINT orders_cancelled_when CHECK ((cancelled_at IS NOT NULL) = (status = 'CANCELLED'));

ALTER TABLE outbox DROP CONSTRAINT outbox_type_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_type_check CHECK (type IN (
    'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'order.fulfilled', 'order.completed', 'order.cancelled', 'order.refunded',
    'payment.recorded', 'payment.confirmed', 'payment.disputed', 'dispute.escalated', 'dispute.decided',
    'listing.sold', 'listing.withdrawn', 'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled'));

ALTER TABLE events DROP CONSTRAINT events_type_check;
ALTER TABLE events ADD CONSTRAINT events_type_check CHECK (type IN (
    'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'order.fulfilled', 'order.completed', 'order.cancelled', 'order.refunded',
    'payment.recorded', 'payment.confirmed', 'payment.disputed', 'dispute.escalated', 'dispute.decided',
    'listing.sold', 'listing.withdrawn', 'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled'));

ALTER TABLE webhooks DROP CONSTRAINT webhooks_events_known;
ALTER TABLE webhooks ADD CONSTRAINT webhooks_events_known CHECK (events <@ ARRAY[
    '*', 'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'order.fulfilled', 'order.completed', 'order.cancelled', 'order.refunded',
    'payment.recorded', 'payment.confirmed', 'payment.disputed', 'dispute.escalated', 'dispute.decided',
    'listing.sold', 'listing.withdrawn', 'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled']);
