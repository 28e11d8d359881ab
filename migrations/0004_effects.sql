-- 0004: durable records of a job's external side effects.
--
-- Before a handler calls an external system through ctx.effect(), a row records the effect as
-- started, with its idempotency key; afterwards the row is confirmed with a bounded result. A
-- later attempt (or a replay) returns a confirmed effect's result without repeating the call, and
-- treats a started-but-unconfirmed effect as an uncertain outcome: reconciled, or retried with the
-- same key. Rows go with their job.
CREATE TABLE job_effects (
  job_id          bigint      NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  name            text        NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
  idempotency_key text        NOT NULL,
  status          text        NOT NULL CHECK (status IN ('started', 'confirmed')),
  result          jsonb,
  attempts        integer     NOT NULL DEFAULT 1,
  lease_token     bigint      NOT NULL,
  started_at      timestamptz NOT NULL DEFAULT now(),
  confirmed_at    timestamptz,
  PRIMARY KEY (job_id, name)
);
