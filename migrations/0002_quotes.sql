-- Quotes of the IAB-style deals routes (POST /api/v1/quotes, POST /api/v1/deals): a buyer's
-- price for a listing, good for a day, which booking turns into an order. A quote restates
-- an agreed order (order_id set when it is made), or offers the ask (order_id set when it is
-- booked, by the purchase it makes). Booking a booked quote again gives the same order.
CREATE TABLE quotes (
    id           uuid PRIMARY KEY,
    buyer_id     uuid NOT NULL REFERENCES agents (id),
    listing_id   uuid NOT NULL REFERENCES listings (id),
    order_id     uuid REFERENCES orders (id),
    amount       bigint NOT NULL CHECK (amount >= 100),
    currency     text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    deal_type    text NOT NULL CHECK (deal_type IN ('PG', 'PD', 'PA')),
    impressions  bigint CHECK (impressions IS NULL OR impressions > 0),
    flight_start date,
    flight_end   date,
    booked_at    timestamptz,
    expires_at   timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT quotes_flight_order CHECK (flight_start IS NULL OR flight_end IS NULL OR flight_start <= flight_end),
    -- A booked quote names its order.
    CONSTRAINT quotes_booked_with_order CHECK (booked_at IS NULL OR order_id IS NOT NULL)
);
-- The sweeper forgets quotes a week after they ran out unbooked.
CREATE INDEX quotes_unbooked_expires_at_idx ON quotes (expires_at) WHERE booked_at IS NULL;
CREATE INDEX quotes_order_id_idx ON quotes (order_id) WHERE order_id IS NOT NULL;
CREATE INDEX quotes_buyer_id_idx ON quotes (buyer_id);
-- Orders of a buyer on a listing, which a quote at the agreed price restates.
CREATE INDEX orders_listing_buyer_idx ON orders (listing_id, buyer_id);
