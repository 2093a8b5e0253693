-- Two more negotiations on an order: `schedule` (the handover's time and place) and
-- `installments` (a payment plan). Neither names an amount on its bids.
--
-- An accepted schedule fixes one of its windows as the order's appointment; a later accepted
-- schedule replaces it. An accepted plan is stored on the order with the confirmed amount paid
-- before it (`plan_base`): confirmed payments after it fill its installments in due order. An
-- installment past its due date that they do not cover raises `payment.overdue` once, recorded
-- in `overdue_installments`, whose key makes a second raise impossible whichever instance sweeps.

ALTER TABLE threads DROP CONSTRAINT threads_kind_check;
ALTER TABLE threads ADD CONSTRAINT threads_kind_check
    CHECK (kind IN ('price', 'refund', 'cancel', 'schedule', 'installments'));

ALTER TABLE bids DROP CONSTRAINT bids_kind_check;
ALTER TABLE bids DROP CONSTRAINT bids_amount_unless_cancel;
ALTER TABLE bids
    ADD CONSTRAINT bids_kind_check CHECK (kind IN ('price', 'refund', 'cancel', 'schedule', 'installments')),
    ADD CONSTRAINT bids_amount_unless_cancel CHECK ((amount IS NULL) = (kind IN ('cancel', 'schedule', 'installments')));

ALTER TABLE orders
    ADD COLUMN appointment_start     timestamptz,
    ADD COLUMN appointment_end       timestamptz,
    ADD COLUMN appointment_method    text CHECK (appointment_method IN ('pickup', 'delivery', 'other')),
    ADD COLUMN appointment_place     text CHECK (char_length(appointment_place) BETWEEN 1 AND 200),
    ADD COLUMN appointment_thread_id uuid REFERENCES threads (id),
    ADD COLUMN plan                  jsonb CHECK (jsonb_typeof(plan) = 'array'),
    ADD COLUMN plan_base             bigint CHECK (plan_base >= 0),
    ADD COLUMN plan_thread_id        uuid REFERENCES threads (id),
    ADD CONSTRAINT orders_appointment_whole CHECK (
        (appointment_start IS NULL) = (appointment_end IS NULL)
        AND (appointment_start IS NULL) = (appointment_method IS NULL)
        AND (appointment_start IS NULL) = (appointment_thread_id IS NULL)
        AND (appointment_place IS NULL OR appointment_start IS NOT NULL)
        AND (appointment_start IS NULL OR appointment_start < appointment_end)),
    ADD CONSTRAINT orders_plan_whole CHECK (
        (plan IS NULL) = (plan_base IS NULL) AND (plan IS NULL) = (plan_thread_id IS NULL));

-- The sweeper looks for overdue installments on orders with a plan only.
CREATE INDEX orders_plan_idx ON orders (id) WHERE plan IS NOT NULL AND status <> 'CANCELLED';

CREATE TABLE overdue_installments (
    order_id  uuid NOT NULL REFERENCES orders (id),
    -- The installment's place in the plan, from 0.
    seq       integer NOT NULL CHECK (seq BETWEEN 0 AND 11),
    raised_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, seq)
);

ALTER TABLE outbox DROP CONSTRAINT outbox_type_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_type_check CHECK (type IN (
    'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'order.fulfilled', 'order.completed', 'order.cancelled', 'order.refunded',
    'order.scheduled', 'payment.recorded', 'payment.confirmed', 'payment.disputed', 'payment.overdue',
    'dispute.escalated', 'dispute.decided',
    'listing.sold', 'listing.withdrawn', 'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled',
    'approval.requested', 'approval.approved', 'approval.denied', 'approval.expired', 'approval.failed'));

ALTER TABLE events DROP CONSTRAINT events_type_check;
ALTER TABLE events ADD CONSTRAINT events_type_check CHECK (type IN (
    'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'order.fulfilled', 'order.completed', 'order.cancelled', 'order.refunded',
    'order.scheduled', 'payment.recorded', 'payment.confirmed', 'payment.disputed', 'payment.overdue',
    'dispute.escalated', 'dispute.decided',
    'listing.sold', 'listing.withdrawn', 'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled',
    'approval.requested', 'approval.approved', 'approval.denied', 'approval.expired', 'approval.failed'));

ALTER TABLE webhooks DROP CONSTRAINT webhooks_events_known;
ALTER TABLE webhooks ADD CONSTRAINT webhooks_events_known CHECK (events <@ ARRAY[
    '*', 'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'order.fulfilled', 'order.completed', 'order.cancelled', 'order.refunded',
    'order.scheduled', 'payment.recorded', 'payment.confirmed', 'payment.disputed', 'payment.overdue',
    'dispute.escalated', 'dispute.decided',
    'listing.sold', 'listing.withdrawn', 'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled',
    'approval.requested', 'approval.approved', 'approval.denied', 'approval.expired', 'approval.failed']);
