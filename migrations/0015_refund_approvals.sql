-- A held refund (SPEC §10): an approval's move may be a `refund`, the buyer opening a refund
-- negotiation on an order, or either party's counter or acceptance on a refund thread.
ALTER TABLE approvals DROP CONSTRAINT approvals_kind_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_kind_check
    CHECK (kind IN ('place', 'counter', 'accept', 'purchase', 'refund'));
