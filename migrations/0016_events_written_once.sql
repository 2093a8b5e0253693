-- Events written once: the statement that makes a change writes its events straight into
-- `events`, numbers them for each agent they concern, and fans them out to those agents'
-- inboxes, in the change's own transaction. There is no outbox and no publisher any more.
--
-- An agent's events are numbered by a counter of its own (`event_heads`), taken in the writing
-- statement: its row stays locked until that transaction ends, so the agent's numbers are given
-- out in commit order, one after another, and a reader who has seen number n never sees a
-- smaller one appear later. That number is the event's `id` as the agent reads it (in
-- `/v1/events`, its stream and its webhooks). An event also has an id of its own (a sequence's,
-- unique, neither gap-free nor in commit order), by which webhook deliveries name it and which
-- the operator's stream of the whole market sends, in the order of the writing transactions
-- (`xid`), each transaction's once every transaction that began before it has ended.

-- What an instance of an earlier version left unpublished is published now, as its publisher
-- would have.
WITH moved AS (
    DELETE FROM outbox RETURNING *
), numbered AS (
    SELECT s.last_id + row_number() OVER (ORDER BY moved.seq) AS id, moved.*
    FROM moved, event_sequence s
), published AS (
    INSERT INTO events (id, type, audience, listing_id, thread_id, bid_id, order_id, data, created_at)
    SELECT id, type, audience, listing_id, thread_id, bid_id, order_id, data, created_at FROM numbered
    RETURNING id, type, audience
), inboxes AS (
    INSERT INTO event_recipients (agent_id, event_id)
    SELECT DISTINCT unnest(audience), id FROM published
), deliveries AS (
    INSERT INTO webhook_deliveries (id, webhook_id, event_id, status, next_attempt_at)
    SELECT gen_random_uuid(), w.id, p.id, 'PENDING', now()
    FROM published p
    JOIN webhooks w ON w.agent_id = ANY (p.audience) AND w.status = 'ACTIVE'
                   AND (p.type = ANY (w.events) OR '*' = ANY (w.events))
)
UPDATE event_sequence SET last_id = last_id + (SELECT count(*) FROM moved);

-- The events' own ids go on from the last one published.
CREATE SEQUENCE events_id_seq OWNED BY events.id;
SELECT setval('events_id_seq', greatest(last_id, 1), last_id > 0) FROM event_sequence;
ALTER TABLE events ALTER COLUMN id SET DEFAULT nextval('events_id_seq');
ALTER TABLE events ALTER COLUMN created_at SET DEFAULT now();

-- The writing transaction, for the operator's stream (0 for the events published before this
-- migration, which keep their order by id), and each recipient's number, in the audience's
-- order (none for those events: each agent's number for them is the event's id, as it was).
ALTER TABLE events ADD COLUMN xid bigint NOT NULL DEFAULT 0;
ALTER TABLE events ALTER COLUMN xid SET DEFAULT pg_current_xact_id()::text::bigint;
ALTER TABLE events ADD COLUMN seqs bigint[];
CREATE INDEX events_xid_idx ON events (xid, id);

-- Below this, every transaction that could write an event here has ended: the lowest xid still
-- running in this database as the statement's snapshot sees it, or past the snapshot's last.
-- A transaction of another database on the same server writes no event here and holds nothing
-- back; one whose database cannot be told (it ended meanwhile, or is not visible to this role)
-- counts as this database's.
CREATE FUNCTION events_horizon() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT least(
        pg_snapshot_xmax(s)::text::bigint,
        (SELECT min(x::text::bigint) FROM pg_snapshot_xip(s) AS x
         WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                           WHERE a.backend_xid::text::bigint = x::text::bigint % 4294967296
                             AND a.datname IS DISTINCT FROM current_database())))
    FROM pg_current_snapshot() AS s
$$;
-- Events are purged oldest first by id, which follows their writing closely enough.
DROP INDEX events_created_at_idx;

-- Each agent's inbox is read by its own numbers. The events published before this migration
-- keep theirs, which were their ids: the column is renamed, not rewritten, and `event_id` is
-- left empty for them.
ALTER TABLE event_recipients RENAME COLUMN event_id TO seq;
ALTER TABLE event_recipients ADD COLUMN event_id bigint;
DROP INDEX event_recipients_event_id_idx;

-- Each agent's last number. Updated by every statement writing an event the agent sees, so its
-- pages keep room for the new row versions.
CREATE TABLE event_heads (
    agent_id uuid PRIMARY KEY,
    last_seq bigint NOT NULL CHECK (last_seq >= 0)
) WITH (fillfactor = 50);
INSERT INTO event_heads (agent_id, last_seq) SELECT agent_id, max(seq) FROM event_recipients GROUP BY agent_id;

DROP TABLE outbox;
DROP TABLE event_sequence;
