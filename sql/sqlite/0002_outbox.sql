-- The transactional outbox (rule OUTBOX). PostgreSQL mirrors these names and columns
-- (uuid for event_id, jsonb for headers, timestamptz for times).
--
-- Named idem_outbox so that it never collides with an application's own `outbox`. An idem
-- release without migration 7 created this table as `outbox`; on such a store migration 7
-- (0007_idem_outbox.sql) renames it and its indexes to the names below.
--
-- AUTOINCREMENT so an id is never reused, even after cleanup deleted the newest rows:
-- the relay publishes in id order. event_id is the UUIDv7 as 16 bytes, created once
-- with the row (IDEM-1). shard is a stable hash of message_key (see the PostgreSQL
-- file); SQLite runs one relay at a time, which owns every shard. Times are Unix ms.
CREATE TABLE idem_outbox (
  id             INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id       BLOB    NOT NULL UNIQUE CHECK (typeof(event_id) = 'blob' AND length(event_id) = 16),
  aggregate_type TEXT    NOT NULL,
  aggregate_id   TEXT    NOT NULL,
  topic          TEXT    NOT NULL,
  message_key    TEXT    NOT NULL,
  shard          INTEGER NOT NULL CHECK (shard >= 0 AND shard < 64),
  payload        TEXT    NOT NULL,
  headers        TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(headers)),
  created_at     INTEGER NOT NULL
                 DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),  -- unix ms
  published_at   INTEGER  -- unix ms; NULL until the broker acknowledged the message
);

CREATE INDEX idem_outbox_unpublished_idx ON idem_outbox (id) WHERE published_at IS NULL;
CREATE INDEX idem_outbox_published_at_idx ON idem_outbox (published_at) WHERE published_at IS NOT NULL;
