-- When a webhook delivery was last claimed for an attempt whose outcome is not yet recorded. A
-- claim that finds it set (the worker that made the attempt stopped, or lost the database,
-- before recording it) logs that attempt, its outcome unknown, before making the next one: the
-- delivery log then shows every attempt, including one that may have reached the receiver.
ALTER TABLE webhook_deliveries ADD COLUMN claimed_at timestamptz;
