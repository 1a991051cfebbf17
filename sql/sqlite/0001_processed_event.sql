-- IDEM-2: the dedup table. One row per (event, consumer group) that has been processed.
-- Marking is INSERT ... ON CONFLICT DO NOTHING: the primary key is the only race-safe
-- check, so the code never SELECTs before it INSERTs.
--
-- event_id is the UUID's 16 raw bytes, not its 36-character text: smaller rows and a
-- smaller key (the key is the whole table). The CHECK keeps a text UUID that was bound
-- by mistake from slipping in as a second, different key for the same event.
--
-- WITHOUT ROWID: the primary key is the only access path for marking, so the rows are
-- stored in the primary-key B-tree itself instead of a rowid table plus a separate
-- unique index (one B-tree insert per mark instead of two).
--
-- processed_at is Unix milliseconds (INTEGER): cheap to compare for the TTL purge
-- (DELETE ... WHERE processed_at < cutoff), and SQLite has no timestamp type.
CREATE TABLE processed_event (
  event_id       BLOB    NOT NULL CHECK (typeof(event_id) = 'blob' AND length(event_id) = 16),
  consumer_group TEXT    NOT NULL CHECK (length(consumer_group) > 0),
  processed_at   INTEGER NOT NULL
                 DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),  -- unix ms
  PRIMARY KEY (event_id, consumer_group)
) WITHOUT ROWID;

-- The TTL purge deletes by age; without this index it would scan the whole table.
CREATE INDEX ix_processed_event_processed_at ON processed_event (processed_at);
