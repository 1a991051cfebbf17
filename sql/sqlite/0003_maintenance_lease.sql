-- Leases that keep a background job single-instance across processes (PostgreSQL uses
-- a session advisory lock instead). A holder takes a lease when it is free, expired or
-- already its own (INSERT ... ON CONFLICT DO UPDATE ... WHERE), renews it while it
-- works, and deletes it when done; a holder that crashed loses it at expires_at.
CREATE TABLE idem_lease (
  name       TEXT    PRIMARY KEY,
  holder     TEXT    NOT NULL,
  expires_at INTEGER NOT NULL  -- unix ms
);
