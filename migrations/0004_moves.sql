-- Moves made in one statement each, and cheaper.

-- A counter moves its thread on (rounds, last bid, deadline) without touching an indexed column,
-- so the thread's new version can stay on its page with no new index entries (a HOT update),
-- given room on the page. The sweeper finds due negotiations through their pending bids
-- instead: a live thread's deadline is its pending bid's.
DROP INDEX threads_due_idx;
CREATE INDEX bids_due_idx ON bids (expires_at) WHERE status = 'PENDING';
ALTER TABLE threads SET (fillfactor = 80);

-- Which pending bids await a policy, said once: `policy_covers` is the rule, and both the view
-- (for bids already stored) and the single-statement moves (for the bid they are inserting, which
-- their own statement cannot yet read back) ask it.

-- Whether `agent`, answering in `role`, has a policy for the thread, its listing, or the role.
-- PL/pgSQL keeps the query's plan for the session; a SQL function that cannot be inlined (this
-- one, for its subquery) would be parsed and planned again in every statement that calls it.
CREATE FUNCTION policy_covers(agent uuid, answering_role text, listing uuid, thread uuid) RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM policies p
                   WHERE p.agent_id = agent
                     AND (p.thread_id = thread OR p.listing_id = listing
                          OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = answering_role)));
END
$$;

CREATE OR REPLACE VIEW bids_awaiting_policies AS
SELECT b.id AS bid_id, t.id AS thread_id, r.agent_id
FROM bids b
JOIN threads t ON t.id = b.thread_id
CROSS JOIN LATERAL (
    SELECT CASE b.author WHEN 'buyer' THEN t.seller_id ELSE t.buyer_id END AS agent_id,
           CASE b.author WHEN 'buyer' THEN 'seller' ELSE 'buyer' END AS role
) r
WHERE b.status = 'PENDING' AND policy_covers(r.agent_id, r.role, t.listing_id, t.id);
