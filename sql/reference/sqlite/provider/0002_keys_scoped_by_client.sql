-- Keys scoped by client, method and path (the Idempotency-Key draft's security
-- considerations): the stored key is the composite (key, client, method, path), so one
-- client's key never finds, replays or blocks another client's stored answer, and one
-- key sent to two resources names two requests. SQLite cannot change a primary key in
-- place: the table is copied into its new shape.
--
-- client_id is a SHA-256 digest (hex) of the client identity header's value
-- (provider.client_header, Authorization by default), never the credential itself; ''
-- is the anonymous client, a request without that header. Keys stored before this
-- migration had no client: they become the anonymous client's on the only resource that
-- took keys, POST /payments/charge, so a billing consumer that sends no credential (the
-- default) still finds them.
CREATE TABLE provider_idempotency_key_scoped (
  idempotency_key text NOT NULL,
  client_id       text NOT NULL,
  request_method  text NOT NULL,
  request_path    text NOT NULL,
  fingerprint     text NOT NULL,
  state           text NOT NULL,
  response_status bigint,
  response_body   text,
  created_at_ms   bigint NOT NULL,
  PRIMARY KEY (idempotency_key, client_id, request_method, request_path)
);
INSERT INTO provider_idempotency_key_scoped
  SELECT idempotency_key, '', 'POST', '/payments/charge', fingerprint, state, response_status,
         response_body, created_at_ms
  FROM provider_idempotency_key;
DROP TABLE provider_idempotency_key;
ALTER TABLE provider_idempotency_key_scoped RENAME TO provider_idempotency_key;

-- The client a charge was made for (the audit names it; '' for older charges).
ALTER TABLE provider_charge ADD COLUMN client_id text NOT NULL DEFAULT '';
