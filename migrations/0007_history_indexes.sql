-- Reads that stay flat as history grows.
--
-- Listing search matches a word anywhere in the title or the description (ILIKE '%word%'):
-- without an index that is a scan of every listing. Trigram indexes answer it from the few
-- listings that hold the word's trigrams; pg_trgm is a trusted extension (PostgreSQL 13 and
-- later), so the database's owner may create it.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX listings_title_trgm_idx ON listings USING gin (title gin_trgm_ops);
CREATE INDEX listings_description_trgm_idx ON listings USING gin (description gin_trgm_ops);

-- An agent's live threads, newest first, without stepping over its ended ones (a busy agent's
-- history is mostly ended threads). Threads are inserted ACTIVE and leave these indexes when
-- they end; a counter changes none of their columns, so it stays a HOT update.
CREATE INDEX threads_buyer_active_idx ON threads (buyer_id, id DESC) WHERE status = 'ACTIVE';
CREATE INDEX threads_seller_active_idx ON threads (seller_id, id DESC) WHERE status = 'ACTIVE';
