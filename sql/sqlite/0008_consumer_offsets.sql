-- Each consumer group's position in each partition it consumes, written in the transaction
-- of the dedup marks and effects it covers, so a failover that takes those back takes the
-- position back with them (docs/consumer-offsets.md). One row per (group, topic,
-- partition), rewritten by each transaction that moves it:
--   next_offset           the next record to consume: one past the partition's prefix of
--                         records done (applied, duplicates, skipped, dead-lettered with
--                         the letter acknowledged by the broker);
--   acknowledged_letters  records above next_offset whose dead letter or retry-topic
--                         letter the broker already acknowledged, as offsets in ascending
--                         order separated by commas ('' when none): a restart skips them
--                         instead of sending their letters again. They leave the list as
--                         next_offset passes them.
CREATE TABLE idem_consumer_offsets (
  consumer_group       TEXT    NOT NULL,
  topic                TEXT    NOT NULL,
  kafka_partition      INTEGER NOT NULL CHECK (kafka_partition >= 0),
  next_offset          INTEGER NOT NULL CHECK (next_offset >= 0),
  acknowledged_letters TEXT    NOT NULL DEFAULT '',
  updated_at           TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (consumer_group, topic, kafka_partition)
);
