-- A listing's concession rule (SPEC §2, "Amount rules"): `strict`, every counter between the two
-- latest positions (the rule every listing had before), or `none`, a counter may retract its
-- mover's own earlier concessions but never cross the other side's pending amount. Existing
-- listings keep the strict rule. A constant default adds the column without rewriting the table.
ALTER TABLE listings
    ADD COLUMN concession_rule text NOT NULL DEFAULT 'strict'
        CONSTRAINT listings_concession_rule_check CHECK (concession_rule IN ('strict', 'none'));
