-- The server instances of the deployment. Each records itself every few seconds and counts the
-- others seen lately, so that limits meant for an agent (requests a second, open streams) are
-- shared out among the instances alive instead of granted by each.
CREATE TABLE instances (
    id         uuid PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);
