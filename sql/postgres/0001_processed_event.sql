-- IDEM-2: the dedup table. One row per (event, consumer group) that has been
-- processed. Marking is INSERT ... ON CONFLICT DO NOTHING against the primary
-- key, the only race-safe check; "one row inserted" means first delivery.
-- Each consumer group has its own rows, so two groups reading the same topic
-- deduplicate independently.
--
-- This is the plain (unpartitioned) table. MigrateOptions::partitioned replaces
-- this migration with generated DDL that RANGE-partitions the same table on
-- event_id (never on processed_at: see SPEC IDEM-2 TTL).
CREATE TABLE processed_event (
  event_id       uuid        NOT NULL,
  consumer_group text        NOT NULL,
  processed_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (event_id, consumer_group)
);

-- For the TTL purge of the unpartitioned table (batched DELETE by age).
CREATE INDEX ix_processed_event_processed_at ON processed_event (processed_at);
