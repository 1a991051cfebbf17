-- The effect log of the built-in `count` handler (`idem consume --handler count`): one
-- row per effect the handler applied, written in the same transaction as the dedup
-- mark. The exactly-once tests count rows per event here. The SQLite schema uses the
-- same names and columns.
--
-- Deliberately NO unique constraint (not on event_id, not on (consumer_group,
-- event_id)): if the dedup logic ever failed, a second row for the same event is the
-- visible evidence. A unique constraint would turn the bug into an error and hide it.
--
-- PARTITION is an SQL keyword (allowed as a column name, but a trap in hand-written
-- queries), so both schemas say kafka_partition, next to kafka_offset.
CREATE TABLE effect_log (
  id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  consumer_group  text        NOT NULL,
  event_id        uuid        NOT NULL,
  topic           text        NOT NULL,
  kafka_partition integer     NOT NULL,
  kafka_offset    bigint      NOT NULL,
  applied_at      timestamptz NOT NULL DEFAULT now()
);

-- Counting effects per (group, event), and per group.
CREATE INDEX effect_log_group_event_idx ON effect_log (consumer_group, event_id);
