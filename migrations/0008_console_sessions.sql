-- The operator console's sessions. The session id travels only in the browser's cookie; the
-- server keeps its SHA-256, so that a copy of this table signs nobody in. Every instance behind
-- a load balancer reads the same rows; a session ends when it expires or the operator signs out.
CREATE TABLE console_sessions (
    id_digest bytea PRIMARY KEY CHECK (length(id_digest) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    CHECK (expires_at > created_at)
);

CREATE INDEX console_sessions_expires_at ON console_sessions (expires_at);
