-- The effect log of the built-in `count` handler (`idem consume --handler count`): one
-- row per effect the handler applied, written in the same transaction as the dedup mark.
-- The exactly-once tests count rows per event here.
--
-- Deliberately NO unique constraint (not on event_id, not on (consumer_group, event_id)):
-- if the dedup logic ever failed, a second row for the same event is the visible
-- evidence. A unique constraint would turn the bug into an error and hide it.
--
-- PARTITION is an SQL keyword in both dialects (allowed as a column name, but a trap in
-- hand-written queries), so both schemas say kafka_partition, next to kafka_offset.
CREATE TABLE effect_log (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  consumer_group  TEXT    NOT NULL,
  event_id        BLOB    NOT NULL CHECK (typeof(event_id) = 'blob' AND length(event_id) = 16),
  topic           TEXT    NOT NULL,
  kafka_partition INTEGER NOT NULL,
  kafka_offset    INTEGER NOT NULL,
  applied_at      INTEGER NOT NULL
                  DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))  -- unix ms
);

-- Counting effects per (group, event), and per group.
CREATE INDEX effect_log_group_event_idx ON effect_log (consumer_group, event_id);
