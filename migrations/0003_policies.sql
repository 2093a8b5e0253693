-- Auto-negotiation: the policies agents set, the decisions waiting to be made for them, and a
-- log of the decisions made.
--
-- A bid that waits for an agent with a policy gets a task in `auto_tasks`, written in the
-- transaction that makes the bid, with its event (see `bids_awaiting_policies`). An executor on any
-- instance locks a waiting task with FOR UPDATE SKIP LOCKED, decides, acts through the bid
-- state machine and marks the task done, all in one transaction: a crash before the commit
-- leaves the task waiting for the next executor, and the state machine's compare-and-set lets
-- only one answer to a bid through. A done task stays for an hour; a policy set by its owner
-- on a bid it had stopped on re-arms it.

-- A policy applies to one agent in one role: its default for the role, or an override for one
-- listing or one thread. The most specific one wins: thread, then listing, then the default.
CREATE TABLE policies (
    id         uuid PRIMARY KEY,
    agent_id   uuid NOT NULL REFERENCES agents (id),
    role       text NOT NULL CHECK (role IN ('buyer', 'seller')),
    listing_id uuid REFERENCES listings (id),
    thread_id  uuid REFERENCES threads (id),
    policy     jsonb NOT NULL CHECK (jsonb_typeof(policy) = 'object'),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT policies_one_scope CHECK (listing_id IS NULL OR thread_id IS NULL)
);
CREATE UNIQUE INDEX policies_agent_default ON policies (agent_id, role) WHERE listing_id IS NULL AND thread_id IS NULL;
CREATE UNIQUE INDEX policies_listing ON policies (agent_id, listing_id) WHERE listing_id IS NOT NULL;
CREATE UNIQUE INDEX policies_thread ON policies (agent_id, thread_id) WHERE thread_id IS NOT NULL;

-- A pending bid that a policy is to answer, for `agent_id` (the responder).
CREATE TABLE auto_tasks (
    bid_id     uuid PRIMARY KEY REFERENCES bids (id) ON DELETE CASCADE,
    thread_id  uuid NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    agent_id   uuid NOT NULL REFERENCES agents (id),
    due_at     timestamptz NOT NULL DEFAULT now(),
    attempts   integer NOT NULL DEFAULT 0,
    -- Set when a decision on the bid committed (or the executor gave up on it).
    done_at    timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX auto_tasks_due_idx ON auto_tasks (due_at) WHERE done_at IS NULL;

-- Pending bids whose responder (the party that did not make them) has a policy that covers
-- them: for their thread, their listing, or the responder's role.
CREATE VIEW bids_awaiting_policies AS
SELECT b.id AS bid_id, t.id AS thread_id, r.agent_id
FROM bids b
JOIN threads t ON t.id = b.thread_id
CROSS JOIN LATERAL (
    SELECT CASE b.author WHEN 'buyer' THEN t.seller_id ELSE t.buyer_id END AS agent_id,
           CASE b.author WHEN 'buyer' THEN 'seller' ELSE 'buyer' END AS role
) r
WHERE b.status = 'PENDING'
  AND EXISTS (SELECT 1 FROM policies p
              WHERE p.agent_id = r.agent_id
                AND (p.thread_id = t.id OR p.listing_id = t.listing_id
                     OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = r.role)));
CREATE INDEX auto_tasks_done_idx ON auto_tasks (done_at) WHERE done_at IS NOT NULL;

-- Every decision an executor made. A bid is answered at most once (the unique index; the state
-- machine enforces it as well); a stop may be decided again after the owner changes its policy.
CREATE TABLE auto_decisions (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bid_id     uuid NOT NULL REFERENCES bids (id) ON DELETE CASCADE,
    thread_id  uuid NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    agent_id   uuid NOT NULL REFERENCES agents (id),
    action     text NOT NULL CHECK (action IN ('accept', 'counter', 'reject', 'stop')),
    -- Why, as a stable code, for the owner only: it can tell which private limit was met.
    reason     text NOT NULL,
    -- A sentence the counterparty may read (for a stop, the owner's sentence: stops are private).
    rationale  text NOT NULL,
    -- The counter the decision made, when it made one.
    counter_bid_id uuid REFERENCES bids (id) ON DELETE CASCADE,
    decided_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT auto_decisions_counter_has_bid CHECK ((action = 'counter') = (counter_bid_id IS NOT NULL))
);
CREATE UNIQUE INDEX auto_decisions_one_answer_per_bid ON auto_decisions (bid_id) WHERE action <> 'stop';
CREATE INDEX auto_decisions_thread_idx ON auto_decisions (thread_id, agent_id);
CREATE INDEX auto_decisions_decided_at_idx ON auto_decisions (decided_at);

-- A stored answer that its request may still replace: the compatibility routes commit the
-- buyer's move, then wait for the seller's answer and store the complete answer. Until then a
-- retry is told the first request is still running.
ALTER TABLE idempotency_keys ADD COLUMN in_progress boolean NOT NULL DEFAULT false;
