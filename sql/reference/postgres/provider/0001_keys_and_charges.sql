-- The reference payment provider's tables (`idem provider`), its own migration set
-- ("payment_provider"), apart from the billing side's "reference" set: the provider
-- usually has a database of its own. IF NOT EXISTS: a provider of an earlier release
-- created these tables itself, unrecorded; this migration adopts them as they are.
-- The SQLite schema uses the same names and columns.

-- One row per Idempotency-Key: what the first request asked for (its fingerprint),
-- whether it is still in flight, and the stored first answer once it is done.
CREATE TABLE IF NOT EXISTS provider_idempotency_key (
  idempotency_key text PRIMARY KEY,
  fingerprint     text NOT NULL,  -- what the request asked for
  state           text NOT NULL,  -- 'in_flight' or 'done'
  response_status bigint,         -- the stored first answer, once done
  response_body   text,
  created_at_ms   bigint NOT NULL
);

-- One row per charge. Deliberately no unique constraint on order_id: a double charge
-- must be visible to the audit, not hidden as an error.
CREATE TABLE IF NOT EXISTS provider_charge (
  payment_id      text PRIMARY KEY,  -- pay_<UUIDv7>: sorts by creation
  order_id        bigint NOT NULL,
  amount          text NOT NULL,
  idempotency_key text NOT NULL,
  traceparent     text,
  created_at_ms   bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS provider_charge_order_id_idx ON provider_charge (order_id);
