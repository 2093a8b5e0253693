-- Moves made in one statement each, and cheaper.

-- A counter moves its thread on (rounds, last bid, deadline) without touching an indexed column,
-- so the thread's new version can stay on its page with no new index entries (a HOT update),
-- given room on the page. The sweeper finds due negotiations through their pending bids
-- instead: a live thread's deadline is its pending bid's.
DROP INDEX threads_due_idx;
CREATE INDEX bids_due_idx ON bids (expires_at) WHERE status = 'PENDING';
ALTER TABLE threads SET (fillfactor = 80);

-- An agent's inbox rows are written by the statement that publishes their event, and deleted
-- with it when it is purged (`db::events::purge_before`); checking each against `events` as it
-- is written (two or three lookups a move) only repeated what that statement had just done.
ALTER TABLE event_recipients DROP CONSTRAINT event_recipients_event_id_fkey;

-- Which pending bids await a policy, said once: `covering_policies` is the rule, and both the
-- view (for bids already stored) and the statements that make moves (for the bid they are
-- inserting, which their own statement cannot read back) ask it. A SQL function returning rows
-- and used in FROM is inlined into the statement that calls it, like a view.

-- The policies with which `agent`, answering in `role`, covers a thread: for the thread, its
-- listing, or the role.
CREATE FUNCTION covering_policies(agent uuid, answering_role text, listing uuid, thread uuid)
RETURNS SETOF policies LANGUAGE sql STABLE AS $$
    SELECT * FROM policies p
    WHERE p.agent_id = agent
      AND (p.thread_id = thread OR p.listing_id = listing
           OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = answering_role))
$$;

CREATE OR REPLACE VIEW bids_awaiting_policies AS
SELECT b.id AS bid_id, t.id AS thread_id, r.agent_id
FROM bids b
JOIN threads t ON t.id = b.thread_id
CROSS JOIN LATERAL (
    SELECT CASE b.author WHEN 'buyer' THEN t.seller_id ELSE t.buyer_id END AS agent_id,
           CASE b.author WHEN 'buyer' THEN 'seller' ELSE 'buyer' END AS role
) r
WHERE b.status = 'PENDING' AND EXISTS (SELECT 1 FROM covering_policies(r.agent_id, r.role, t.listing_id, t.id));
