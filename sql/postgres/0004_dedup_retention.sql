-- One dedup retention per store. Every consumer declares the dedup
-- retention its horizon relies on, per consumer group, and renews the declaration while
-- it runs; maintenance keeps dedup marks for the longest retention declared and not
-- expired (renewed_at_ms + retention_ms in the future). A group declaring two retentions
-- (a rolling change of its horizon) has two rows: the longer holds until it expires.
CREATE TABLE idem_dedup_retention (
  consumer_group TEXT   NOT NULL,
  retention_ms   BIGINT NOT NULL CHECK (retention_ms > 0),
  declared_by    TEXT   NOT NULL,  -- host and pid of the last renewal, for `idem retention list`
  renewed_at_ms  BIGINT NOT NULL,  -- unix ms
  PRIMARY KEY (consumer_group, retention_ms)
);
-- What maintenance dropped: dedup marks of events born before born_before_ms may be gone.
-- One row; consumers read it with their declaration and treat such events as past their
-- horizon (so a consumer started after a short-retention pass never re-executes them).
-- Maintenance and a declaring consumer both lock this row first, so a pass never misses
-- a declaration committed before it and a consumer never misses a pass before it.
CREATE TABLE idem_dedup_marks_dropped (
  id             INTEGER PRIMARY KEY CHECK (id = 1),
  born_before_ms BIGINT  NOT NULL,  -- 0: nothing dropped (by an idem that records it)
  dropped_at_ms  BIGINT  NOT NULL,  -- when the pass that set born_before_ms ran
  retention_ms   BIGINT  NOT NULL   -- the dedup retention that pass kept
);
INSERT INTO idem_dedup_marks_dropped (id, born_before_ms, dropped_at_ms, retention_ms)
VALUES (1, 0, 0, 0);
