-- The operator may suspend an agent: its keys are refused, its policies stop acting, and its
-- live negotiations end with reason `agent_suspended` (the server withdraws the pending bids it
-- authored and rejects those waiting for its answer). Reinstating clears the mark; what ended
-- stays ended.
ALTER TABLE agents
    ADD COLUMN suspended_at     timestamptz,
    ADD COLUMN suspended_reason text CHECK (char_length(suspended_reason) <= 500),
    ADD CONSTRAINT agents_reason_only_when_suspended CHECK (suspended_at IS NOT NULL OR suspended_reason IS NULL);
-- The operator's list of suspended agents.
CREATE INDEX agents_suspended_idx ON agents (id) WHERE suspended_at IS NOT NULL;

ALTER TABLE bids DROP CONSTRAINT bids_reason_check;
ALTER TABLE bids ADD CONSTRAINT bids_reason_check CHECK (reason IN (
    'countered', 'accepted', 'rejected', 'withdrawn', 'expired', 'listing_sold', 'listing_withdrawn',
    'agent_suspended'));

ALTER TABLE threads DROP CONSTRAINT threads_closed_reason_check;
ALTER TABLE threads ADD CONSTRAINT threads_closed_reason_check CHECK (closed_reason IN (
    'accepted', 'rejected', 'withdrawn', 'expired', 'listing_sold', 'listing_withdrawn', 'agent_suspended'));

-- A suspended agent's policies cover nothing: no task is queued for it. Every statement that
-- queues tasks asks this function, so the rule holds for all of them.
CREATE OR REPLACE FUNCTION covering_policies(agent uuid, answering_role text, listing uuid, thread uuid)
RETURNS SETOF policies LANGUAGE sql STABLE AS $$
    SELECT * FROM policies p
    WHERE p.agent_id = agent
      AND (p.thread_id = thread OR p.listing_id = listing
           OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = answering_role))
      AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.id = agent AND a.suspended_at IS NOT NULL)
$$;
