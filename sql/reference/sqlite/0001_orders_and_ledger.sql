-- The reference system's tables (SPEC section 2). PostgreSQL mirrors these names and
-- columns (numeric(18,2) for amounts, uuid for event ids, timestamptz for times).

-- Orders, written by the order service. Amounts are exact decimal text ("12.30"):
-- SQLite has no exact decimal type and a REAL would turn money into a binary float.
-- Times are RFC 3339 text.
CREATE TABLE orders (
  id             INTEGER PRIMARY KEY,
  customer_id    INTEGER NOT NULL,
  total_amount   TEXT    NOT NULL,  -- exact decimal text
  status         TEXT    NOT NULL DEFAULT 'created'
                 CHECK (status IN ('created', 'confirmed')),
  payment_status TEXT    NOT NULL DEFAULT 'unpaid'
                 CHECK (payment_status IN ('unpaid', 'charged')),
  created_at     TEXT    NOT NULL,
  confirmed_at   TEXT
);

-- The billing consumer's append-only ledger: one row per charge it recorded.
-- AUTOINCREMENT so an id is never reused, even after the newest row is deleted.
--
-- Deliberately NO unique constraint on order_id (nor on event_id): the ledger must be
-- able to record a double effect, so that the exactly-once tests can see one if the
-- dedup logic ever fails. A unique constraint here would hide the bug as an error.
CREATE TABLE billing_ledger (
  id                  INTEGER PRIMARY KEY AUTOINCREMENT,
  order_id            INTEGER NOT NULL,
  event_id            BLOB    NOT NULL CHECK (typeof(event_id) = 'blob' AND length(event_id) = 16),
  amount              TEXT    NOT NULL,  -- exact decimal text
  provider_payment_id TEXT    NOT NULL,
  created_at          TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE INDEX billing_ledger_order_id_idx ON billing_ledger (order_id);
