-- Several issues at once, and deadlocks resolved.
--
-- A listing may declare the issues negotiated beside price (a JSON array, checked by the
-- server against the domain's rules; every bid's terms then give a value for each). A thread
-- that stopped converging is marked once (`deadlock_at`) with the mediator's suggestion, and
-- records which parties agreed to settle at it; `negotiation.deadlock` tells both parties.

ALTER TABLE listings
    ADD COLUMN issues jsonb CHECK (issues IS NULL OR (jsonb_typeof(issues) = 'array' AND jsonb_array_length(issues) BETWEEN 1 AND 8));

ALTER TABLE threads
    ADD COLUMN deadlock_at timestamptz,
    ADD COLUMN mediation jsonb CHECK (mediation IS NULL OR jsonb_typeof(mediation) = 'object'),
    ADD COLUMN mediation_agreed text[] NOT NULL DEFAULT '{}'
        CHECK (mediation_agreed <@ ARRAY['buyer', 'seller']::text[]),
    -- A suggestion exactly when the thread was marked; agreement only to a suggestion.
    ADD CONSTRAINT threads_mediation_when_deadlocked CHECK ((deadlock_at IS NULL) = (mediation IS NULL)),
    ADD CONSTRAINT threads_agreed_to_a_suggestion CHECK (mediation IS NOT NULL OR cardinality(mediation_agreed) = 0);

ALTER TABLE outbox DROP CONSTRAINT outbox_type_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_type_check CHECK (type IN (
    'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'listing.sold', 'listing.withdrawn',
    'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled'));

ALTER TABLE events DROP CONSTRAINT events_type_check;
ALTER TABLE events ADD CONSTRAINT events_type_check CHECK (type IN (
    'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'listing.sold', 'listing.withdrawn',
    'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled'));

ALTER TABLE webhooks DROP CONSTRAINT webhooks_events_known;
ALTER TABLE webhooks ADD CONSTRAINT webhooks_events_known CHECK (events <@ ARRAY[
    '*', 'bid.placed', 'bid.countered', 'bid.accepted', 'bid.rejected', 'bid.expired',
    'thread.closed', 'order.created', 'listing.sold', 'listing.withdrawn',
    'negotiation.action_required', 'negotiation.deadlock', 'webhook.disabled']);
