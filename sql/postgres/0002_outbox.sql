-- The transactional outbox (rule OUTBOX): a row is written in the same transaction as
-- the business change that gives birth to the event, and a relay publishes it later.
-- The SQLite schema uses the same names and columns.
--
-- Named idem_outbox so that it never collides with an application's own `outbox`. An idem
-- release without migration 6 created this table as `outbox`; on such a store migration 6
-- (0006_idem_outbox.sql) renames it and everything named after it to the names below.
--
-- id orders the events: the relay publishes unpublished rows in id order.
-- event_id is the UUIDv7 created once, with the row (IDEM-1); a resend carries it again.
-- shard is a stable hash of message_key (FNV-1a 32 bit, mod 64, computed by the library):
-- every event of one key lands in one shard, and a relay owns whole shards at a time
-- (a session advisory lock per shard), so two relays never publish the same key's
-- events concurrently and per-key order holds with several relays (docs/outbox.md).
CREATE TABLE idem_outbox (
  id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id       uuid        NOT NULL UNIQUE,
  aggregate_type text        NOT NULL,
  aggregate_id   text        NOT NULL,
  topic          text        NOT NULL,
  message_key    text        NOT NULL,
  shard          integer     NOT NULL CHECK (shard >= 0 AND shard < 64),
  payload        text        NOT NULL,
  headers        jsonb       NOT NULL DEFAULT '{}'::jsonb,
  created_at     timestamptz NOT NULL DEFAULT now(),
  published_at   timestamptz
);

-- What the relay scans: unpublished rows in id order. Partial, so it stays as small
-- as the backlog however large the table grows.
CREATE INDEX idem_outbox_unpublished_idx ON idem_outbox (id) WHERE published_at IS NULL;
-- What retention cleanup scans: published rows by age.
CREATE INDEX idem_outbox_published_at_idx ON idem_outbox (published_at) WHERE published_at IS NOT NULL;

-- A wake-up hint for idle relays (LISTEN idem_outbox), sent once per transaction:
-- the first idem_outbox INSERT of a transaction notifies and sets a transaction-local flag;
-- the trigger's WHEN clause skips the function for every later INSERT of that
-- transaction (outbox.enqueue() inserts one row per statement, so a statement-level
-- trigger alone would run the function once per event). The flag is reverted when the
-- transaction (or a savepoint around the INSERT) ends, together with the notification
-- itself. PostgreSQL delivers notifications only on commit. Polling stays the
-- correctness path: a lost notification only delays publication.
CREATE FUNCTION idem_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('idem.outbox_notified', 'on', true);
  PERFORM pg_notify('idem_outbox', '');
  RETURN NULL;
END;
$$;
CREATE TRIGGER idem_outbox_notify AFTER INSERT ON idem_outbox
  FOR EACH STATEMENT
  WHEN (current_setting('idem.outbox_notified', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION idem_outbox_notify();
