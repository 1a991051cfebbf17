-- Rows the producer or the broker refused for good (too large, topic unknown or not
-- authorized, record invalid): the relay sets them aside instead of sending them again
-- forever, which would hold back every later row of their shards. A rejected row keeps
-- published_at NULL, is never claimed (the claim skips rejected_at IS NOT NULL) and is
-- never deleted by retention; `idem outbox rejected` lists them and `idem outbox
-- requeue ID` clears both columns once the cause is fixed (docs/outbox.md).
-- Nullable columns without a default: adding them rewrites nothing.
ALTER TABLE idem_outbox
  ADD COLUMN rejected_at     timestamptz,
  ADD COLUMN rejected_reason text;

-- What `idem outbox rejected` and the relay's count of rejected rows read; as small as
-- the number of rejected rows.
CREATE INDEX idem_outbox_rejected_idx ON idem_outbox (id) WHERE rejected_at IS NOT NULL;
