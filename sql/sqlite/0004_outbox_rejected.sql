-- Rows the producer or the broker refused for good, set aside by the relay (see the
-- PostgreSQL file, sql/postgres/0003_outbox_rejected.sql). Times are Unix ms.
ALTER TABLE idem_outbox ADD COLUMN rejected_at INTEGER;  -- unix ms; NULL unless rejected
ALTER TABLE idem_outbox ADD COLUMN rejected_reason TEXT;

CREATE INDEX idem_outbox_rejected_idx ON idem_outbox (id) WHERE rejected_at IS NOT NULL;
