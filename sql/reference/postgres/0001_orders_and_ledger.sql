-- Tables of the reference system (SPEC section 2): the order service's orders
-- and the billing consumer's append-only ledger. The SQLite schema uses the
-- same names and columns.

CREATE TABLE orders (
  id             bigint        PRIMARY KEY,
  customer_id    bigint        NOT NULL,
  -- Money is exact: numeric, never a binary float.
  total_amount   numeric(18,2) NOT NULL CHECK (total_amount >= 0),
  status         text          NOT NULL DEFAULT 'created'
                               CHECK (status IN ('created', 'confirmed')),
  payment_status text          NOT NULL DEFAULT 'unpaid'
                               CHECK (payment_status IN ('unpaid', 'charged')),
  created_at     timestamptz   NOT NULL DEFAULT now(),
  confirmed_at   timestamptz
);

-- One row per charge the billing consumer made. Deliberately NO unique
-- constraint on order_id: the ledger must not hide a double effect. If the
-- exactly-once machinery ever fails, a second row for the same order is the
-- visible evidence the invariant checks look for ("exactly one ledger row").
CREATE TABLE billing_ledger (
  id                  bigint        GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  order_id            bigint        NOT NULL,
  event_id            uuid          NOT NULL,
  amount              numeric(18,2) NOT NULL,
  provider_payment_id text          NOT NULL,
  created_at          timestamptz   NOT NULL DEFAULT now()
);

CREATE INDEX billing_ledger_order_id_idx ON billing_ledger (order_id);
