-- The event types of the order's negotiations (0010) and of approvals (0011) together: each of
-- those migrations allowed its own beside the ones before it.

ALTER TABLE outbox DROP CONSTRAINT outbox_type_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_type_check CHECK (type IN (
    'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'order.fulfilled', 'order.completed', 'order.cancelled', 'order.refunded',
    'payment.recorded', 'payment.confirmed', 'payment.disputed', 'dispute.escalated', 'dispute.decided',
    'listing.sold', 'listing.withdrawn', 'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled',
    'approval.requested', 'approval.approved', 'approval.denied', 'approval.expired', 'approval.failed'));

ALTER TABLE events DROP CONSTRAINT events_type_check;
ALTER TABLE events ADD CONSTRAINT events_type_check CHECK (type IN (
    'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'order.fulfilled', 'order.completed', 'order.cancelled', 'order.refunded',
    'payment.recorded', 'payment.confirmed', 'payment.disputed', 'dispute.escalated', 'dispute.decided',
    'listing.sold', 'listing.withdrawn', 'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled',
    'approval.requested', 'approval.approved', 'approval.denied', 'approval.expired', 'approval.failed'));

ALTER TABLE webhooks DROP CONSTRAINT webhooks_events_known;
ALTER TABLE webhooks ADD CONSTRAINT webhooks_events_known CHECK (events <@ ARRAY[
    '*', 'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'order.fulfilled', 'order.completed', 'order.cancelled', 'order.refunded',
    'payment.recorded', 'payment.confirmed', 'payment.disputed', 'dispute.escalated', 'dispute.decided',
    'listing.sold', 'listing.withdrawn', 'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled',
    'approval.requested', 'approval.approved', 'approval.denied', 'approval.expired', 'approval.failed']);
