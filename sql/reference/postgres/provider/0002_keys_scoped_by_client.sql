-- Keys scoped by client, method and path (the Idempotency-Key draft's security
-- considerations): the stored key is the composite (key, client, method, path), so one
-- client's key never finds, replays or blocks another client's stored answer, and one
-- key sent to two resources names two requests. The key stays the leading column of
-- the primary key: lookups name it, and it is far more selective than the client.
--
-- client_id is a SHA-256 digest (hex) of the client identity header's value
-- (provider.client_header, Authorization by default), never the credential itself; ''
-- is the anonymous client, a request without that header. Keys stored before this
-- migration had no client: they become the anonymous client's on the only resource that
-- took keys, POST /payments/charge, so a billing consumer that sends no credential (the
-- default) still finds them.
ALTER TABLE provider_idempotency_key
  ADD COLUMN client_id      text NOT NULL DEFAULT '',
  ADD COLUMN request_method text NOT NULL DEFAULT 'POST',
  ADD COLUMN request_path   text NOT NULL DEFAULT '/payments/charge';
ALTER TABLE provider_idempotency_key DROP CONSTRAINT provider_idempotency_key_pkey;
ALTER TABLE provider_idempotency_key
  ADD PRIMARY KEY (idempotency_key, client_id, request_method, request_path);
ALTER TABLE provider_idempotency_key
  ALTER COLUMN client_id DROP DEFAULT,
  ALTER COLUMN request_method DROP DEFAULT,
  ALTER COLUMN request_path DROP DEFAULT;

-- The client a charge was made for (the audit names it; '' for older charges).
ALTER TABLE provider_charge ADD COLUMN client_id text NOT NULL DEFAULT '';
