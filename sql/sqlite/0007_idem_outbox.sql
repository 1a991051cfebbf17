-- Moves a store created by an idem release whose outbox table was called `outbox` to the
-- name idem_outbox, which cannot collide with an application's own `outbox`, and leaves a
-- view `outbox` in its place for one release, so that processes of the previous release
-- (an order service, a relay) keep working during an upgrade (docs/upgrading.md).
--
-- A store created by this release got idem_outbox from migration 2 and has nothing to
-- rename: there idem records this migration without running it (the store checks for
-- idem_outbox first, stores/migration.hpp), so such a store never has an `outbox`.
--
-- The rename keeps every row and the AUTOINCREMENT position (SQLite renames the table's
-- sqlite_sequence entry and its UNIQUE index with it). SQLite cannot rename an index, so
-- the three partial indexes are built again under their new names (a scan of the table).
ALTER TABLE outbox RENAME TO idem_outbox;
DROP INDEX outbox_unpublished_idx;
DROP INDEX outbox_published_at_idx;
DROP INDEX outbox_rejected_idx;
CREATE INDEX idem_outbox_unpublished_idx ON idem_outbox (id) WHERE published_at IS NULL;
CREATE INDEX idem_outbox_published_at_idx ON idem_outbox (published_at) WHERE published_at IS NOT NULL;
CREATE INDEX idem_outbox_rejected_idx ON idem_outbox (id) WHERE rejected_at IS NOT NULL;

-- The compatibility view. SQLite views are read-only, so INSTEAD OF triggers carry the
-- previous release's writes to the table: the order service's INSERT (a view has no
-- defaults, so the table's are written out here), the relay's marks, rejections and
-- requeues (UPDATE) and its cleanup (DELETE). SQLite does not count rows changed through
-- INSTEAD OF triggers, so such a statement reports 0 rows changed: the previous
-- release's relay then deletes one batch of published rows per cleanup pass and counts
-- none, and its `idem outbox requeue` says "is not a rejected row" although it did
-- requeue (use this release's CLI).
-- Dropped by the next release's migrations.
CREATE VIEW outbox AS
SELECT id, event_id, aggregate_type, aggregate_id, topic, message_key, shard, payload, headers,
       created_at, published_at, rejected_at, rejected_reason
FROM idem_outbox;

CREATE TRIGGER idem_outbox_view_insert INSTEAD OF INSERT ON outbox
BEGIN
  INSERT INTO idem_outbox (id, event_id, aggregate_type, aggregate_id, topic, message_key, shard,
                           payload, headers, created_at, published_at, rejected_at,
                           rejected_reason)
  VALUES (NEW.id, NEW.event_id, NEW.aggregate_type, NEW.aggregate_id, NEW.topic,
          NEW.message_key, NEW.shard, NEW.payload, coalesce(NEW.headers, '{}'),
          coalesce(NEW.created_at,
                   CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),  -- unix ms
          NEW.published_at, NEW.rejected_at, NEW.rejected_reason);
END;

CREATE TRIGGER idem_outbox_view_update INSTEAD OF UPDATE ON outbox
BEGIN
  UPDATE idem_outbox
  SET id = NEW.id, event_id = NEW.event_id, aggregate_type = NEW.aggregate_type,
      aggregate_id = NEW.aggregate_id, topic = NEW.topic, message_key = NEW.message_key,
      shard = NEW.shard, payload = NEW.payload, headers = NEW.headers,
      created_at = NEW.created_at, published_at = NEW.published_at,
      rejected_at = NEW.rejected_at, rejected_reason = NEW.rejected_reason
  WHERE id = OLD.id;
END;

CREATE TRIGGER idem_outbox_view_delete INSTEAD OF DELETE ON outbox
BEGIN
  DELETE FROM idem_outbox WHERE id = OLD.id;
END;
