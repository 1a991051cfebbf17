-- Moves a store created by an idem release whose outbox table was called `outbox` to the
-- name idem_outbox, which cannot collide with an application's own `outbox`, and leaves a
-- view `outbox` in its place for one release, so that a relay and an order service of the
-- previous release keep working during a rolling upgrade (docs/upgrading.md).
--
-- A store created by this release got idem_outbox from migration 2 and has nothing to
-- rename: there idem records this migration without running it (the store checks for
-- idem_outbox first, stores/migration.hpp), so such a store never has an `outbox`.
--
-- Renames keep every row, the identity sequence's position, the constraints, the
-- indexes, the NOTIFY trigger and the privileges granted on the table; they rewrite
-- nothing, but ALTER TABLE takes an ACCESS EXCLUSIVE lock, so the migration waits for
-- the transactions running on the table (claims and marks are short) and holds the next
-- ones back until it commits. The LISTEN channel (idem_outbox) keeps its name.
ALTER TABLE outbox RENAME TO idem_outbox;
ALTER TABLE idem_outbox RENAME CONSTRAINT outbox_pkey TO idem_outbox_pkey;
ALTER TABLE idem_outbox RENAME CONSTRAINT outbox_event_id_key TO idem_outbox_event_id_key;
ALTER TABLE idem_outbox RENAME CONSTRAINT outbox_shard_check TO idem_outbox_shard_check;
ALTER INDEX outbox_unpublished_idx RENAME TO idem_outbox_unpublished_idx;
ALTER INDEX outbox_published_at_idx RENAME TO idem_outbox_published_at_idx;
ALTER INDEX outbox_rejected_idx RENAME TO idem_outbox_rejected_idx;
ALTER SEQUENCE outbox_id_seq RENAME TO idem_outbox_id_seq;
ALTER TRIGGER outbox_notify ON idem_outbox RENAME TO idem_outbox_notify;

-- The compatibility view: every column, no condition, one table, so PostgreSQL updates
-- it automatically. The previous release's statements run through it unchanged: its
-- claim (a SELECT), its marks, rejections and requeues (UPDATE), its cleanup (DELETE)
-- and the order service's INSERT, whose omitted columns (id, created_at) take the
-- table's defaults and whose rows fire the table's NOTIFY trigger. A running relay's
-- prepared statements are planned again against the view on their next use.
-- Dropped by the next release's migrations.
CREATE VIEW outbox AS
SELECT id, event_id, aggregate_type, aggregate_id, topic, message_key, shard, payload, headers,
       created_at, published_at, rejected_at, rejected_reason
FROM idem_outbox;

-- A view is its own object: privileges granted on the table (to a relay's or an order
-- service's role) do not reach it. Grant the view what the table grants, so each role
-- keeps exactly the access it had under the old name.
DO $$
DECLARE
  grant_row record;
BEGIN
  FOR grant_row IN
    SELECT a.privilege_type,
           CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END AS grantee,
           a.is_grantable
    FROM pg_class c
    CROSS JOIN LATERAL aclexplode(c.relacl) a
    LEFT JOIN pg_roles r ON r.oid = a.grantee
    WHERE c.oid = 'idem_outbox'::regclass AND a.grantee <> c.relowner
      AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
  LOOP
    EXECUTE format('GRANT %s ON outbox TO %s%s', grant_row.privilege_type, grant_row.grantee,
                   CASE WHEN grant_row.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
  END LOOP;
END;
$$;
