-- The web console's replay audit: who replayed which dead letter when, and what came of
-- it. A row is inserted (outcome 'started') before the replay sends anything and updated
-- with its outcome after, so a console that dies part-way still leaves a trace of the
-- attempt. Rows are never deleted by idem.
--
-- IF NOT EXISTS: idem releases before the console had its own migration set created this
-- table (same columns, same index) as version 5 of idem's own set. On a store migrated
-- by one of them this migration finds the table, keeps its rows and only records itself.
CREATE TABLE IF NOT EXISTS idem_console_replay (
  id            BIGSERIAL PRIMARY KEY,
  started_at_ms BIGINT  NOT NULL,  -- unix ms
  operator      TEXT    NOT NULL,  -- the name the operator gave, as typed
  remote_addr   TEXT    NOT NULL,  -- the address the request came from
  dlq_topic     TEXT    NOT NULL,
  dlq_partition INTEGER NOT NULL,
  dlq_offset    BIGINT  NOT NULL,
  event_id      TEXT,              -- NULL for a letter without one
  target_topic  TEXT    NOT NULL,
  outcome       TEXT    NOT NULL,  -- started, replayed, refused_stale, no_target, failed, error
  detail        TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS ix_idem_console_replay_started ON idem_console_replay (started_at_ms);
