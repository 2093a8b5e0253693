-- Sessions of the approval page (/approve), each signed into with an approver's token. As with
-- the console's, the session id travels only in the browser's cookie and the server keeps its
-- SHA-256, so a copy of this table signs nobody in. A session is its approver's: it ends when it
-- expires, when the approver signs out, and it lets nothing in once the approver is revoked.
CREATE TABLE approver_sessions (
    id_digest   bytea PRIMARY KEY CHECK (length(id_digest) = 32),
    approver_id uuid NOT NULL REFERENCES approvers (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    CHECK (expires_at > created_at)
);

CREATE INDEX approver_sessions_expires_at ON approver_sessions (expires_at);
CREATE INDEX approver_sessions_approver_id ON approver_sessions (approver_id);

-- An approver's webhook (`POST /v1/agents/me/approvers` with a `webhook_url`): a webhook of its
-- agent, delivered and signed as every other, that takes the agent's approval.* events only, and
-- is disabled when its approver is revoked.
ALTER TABLE webhooks ADD COLUMN approver_id uuid REFERENCES approvers (id);
CREATE INDEX webhooks_approver_id ON webhooks (approver_id) WHERE approver_id IS NOT NULL;
