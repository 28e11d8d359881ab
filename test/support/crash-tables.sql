-- Side tables of the crash suite and the soak (test/support/crash-worker.mjs writes them), in the
-- test's own database, beside (not inside) the queue's schema.

-- One row per handler run. Times on both clocks: *_local is the child's Date.now() (epoch ms),
-- *_db the database's clock_timestamp() when the recorder's write arrived.
CREATE TABLE crash_executions (
  seq           bigserial,
  id            text PRIMARY KEY,            -- <workerId>:<n>
  job_id        bigint NOT NULL,
  lease_token   bigint NOT NULL,
  attempt       integer NOT NULL,
  worker        text NOT NULL,
  pid           integer NOT NULL,
  queue         text NOT NULL,
  behaviour     text NOT NULL,
  started_local double precision NOT NULL,
  started_db    timestamptz NOT NULL DEFAULT clock_timestamp(),
  aborted_local double precision,
  aborted_db    timestamptz,
  abort_code    text,
  ended_local   double precision,
  ended_db      timestamptz,
  outcome       text CHECK (outcome IN ('ok', 'threw')),  -- NULL: never ended (killed, hung)
  error         text
);
CREATE INDEX crash_executions_job ON crash_executions (job_id, lease_token);

-- What the engine of each child reported after a handler ran.
CREATE TABLE crash_outcomes (
  id          bigserial PRIMARY KEY,
  job_id      bigint NOT NULL,
  lease_token bigint,
  worker      text NOT NULL,
  kind        text NOT NULL,                 -- succeeded | failed | lease_lost | released
  detail      text,
  at_local    double precision NOT NULL,
  at_db       timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The fake external service: every call, and the effect applied once per idempotency key.
CREATE TABLE crash_service_calls (
  call_id         text PRIMARY KEY,          -- <workerId>:<job>:<token>: a retried write is one call
  idempotency_key text NOT NULL,
  job_id          bigint NOT NULL,
  lease_token     bigint NOT NULL,
  worker          text NOT NULL,
  applied         boolean NOT NULL,
  at_db           timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE crash_service_effects (
  idempotency_key text PRIMARY KEY,
  job_id          bigint NOT NULL,
  lease_token     bigint NOT NULL,
  worker          text NOT NULL,
  at_db           timestamptz NOT NULL DEFAULT clock_timestamp()
);
