import pg from 'pg';
import { PermanentJobError, RetryableJobError, type PgQueueOptions } from '../../lib/engine/index.js';
import { createStore } from '../../lib/engine/store/index.js';
import { engineFixture, testLogger, waitForOutcome } from '../support/engine.js';
import { attemptEnded, testSignals } from '../support/signals.js';

/**
 * `preparedStatements: false` (for PgBouncer in transaction mode, where consecutive statements of
 * one client run on different server connections): every statement the engine sends is unnamed.
 * With the default (named statements, prepared once per connection), a statement whose name the
 * connection does not know, or knows already, is what a transaction pooler does to them: one
 * warning names the option. The real PgBouncer runs are in test/topologies/.
 */

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('prepared');
  await fx.pool.query('CREATE TABLE side_rows (job_id bigint NOT NULL)');
});
afterAll(async () => {
  await fx.close();
});

interface Sent {
  text: string;
  named: boolean;
}

/** A pool whose clients record every query config they send: its text, and whether it has a name. */
function recordingPool(max: number): { pool: pg.Pool; sent: Sent[] } {
  const sent: Sent[] = [];
  class RecordingClient extends pg.Client {
    override query(...args: unknown[]): never {
      const [config] = args as [{ name?: unknown; text?: unknown } | string];
      if (typeof config === 'object' && config !== null && typeof config.text === 'string') sent.push({ text: config.text, named: typeof config.name === 'string' });
      else if (typeof config === 'string') sent.push({ text: config, named: false });
      return (super.query as (...a: unknown[]) => never)(...args);
    }
  }
  const pool = new pg.Pool({ connectionString: fx.url, Client: RecordingClient, max });
  pool.on('error', () => {});
  return { pool, sent };
}

/**
 * Enqueue, claim, heartbeat, ctx.complete, a retry (the scheduler promotes it), a permanent
 * failure (dead), a replay, the reaper's and the scheduler's passes, stats and the reads: what
 * the engine sends in a day, on `pool`.
 */
async function workload(pool: pg.Pool, options: Partial<PgQueueOptions>, queue: string) {
  const logger = testLogger();
  const engine = fx.make({ connectionString: undefined, pool, logger, ...options });
  const finished = new Set<string>();
  engine.work(
    queue,
    async (job, ctx) => {
      const kind = (job.payload as { kind: string }).kind;
      if (kind === 'retry' && ctx.attempt === 1) throw new RetryableJobError('once', { code: 'AGAIN', retryAfterMs: 10 });
      if (kind === 'permanent') throw new PermanentJobError('never', { code: 'NEVER' });
      if (kind === 'heartbeat') {
        await new Promise((resolve) => setTimeout(resolve, 400));
        await ctx.heartbeat();
      }
      if (kind === 'complete') await ctx.complete((tx) => tx.query({ text: 'INSERT INTO side_rows (job_id) VALUES ($1)', values: [job.id] } as pg.QueryConfig));
      finished.add(job.id);
    },
    { leaseMs: 1_000 },
  );
  await engine.start();
  const kinds = ['noop', 'complete', 'heartbeat', 'retry', 'permanent'];
  const ids = await engine.enqueueMany(kinds.map((kind) => ({ queue, payload: { kind } })));
  const [dead] = await engine.enqueueMany([{ queue, payload: { kind: 'permanent' } }]);
  await waitForOutcome(engine, dead!, 'dead');
  await engine.replay(dead!);
  const signals = testSignals(engine);
  await Promise.all(ids.map((id, i) => attemptEnded(signals, id, kinds[i] === 'permanent' ? 'dead' : 'succeeded')));
  await engine.reapOnce();
  await engine.stats();
  await engine.listDead({ queue });
  await engine.getJobEvents(ids[0]!);
  await engine.stop();
  return { logger, finished };
}

test('preparedStatements: false sends every statement unnamed (claims, completions, ctx.complete, heartbeats, retries, the reaper, the scheduler, probes, reads)', async () => {
  const { pool, sent } = recordingPool(4);
  try {
    const { logger } = await workload(pool, { preparedStatements: false }, 'unnamed');
    expect(logger.lines).toEqual([]);
    const engineStatements = sent.filter((s) => /pgqueue/.test(s.text));
    // Sanity: the workload did send the statements this is about.
    for (const what of ['FOR UPDATE SKIP LOCKED', 'unnest', 'pg_notify', 'heartbeat_at = now()', "SET status = 'pending'"]) {
      expect(engineStatements.some((s) => s.text.includes(what)), what).toBe(true);
    }
    expect(engineStatements.filter((s) => s.named)).toEqual([]);
    expect(sent.filter((s) => s.named)).toEqual([]);
  } finally {
    await pool.end();
  }
});

test('by default the engine prepares its statements by name (the ones planned per call stay unnamed)', async () => {
  const { pool, sent } = recordingPool(4);
  try {
    const { logger } = await workload(pool, {}, 'named');
    expect(logger.lines).toEqual([]);
    const named = sent.filter((s) => s.named);
    expect(named.some((s) => s.text.includes('FOR UPDATE SKIP LOCKED'))).toBe(true);
    // listDead is planned per call (its right index depends on its values), whatever the option.
    expect(sent.some((s) => !s.named && s.text.includes("j.status = 'dead'"))).toBe(true);
  } finally {
    await pool.end();
  }
});

test('a prepared statement missing from its connection, or already there (what a transaction pooler does), is told once, naming preparedStatements', async () => {
  const pool = new pg.Pool({ connectionString: fx.url, max: 1 });
  pool.on('error', () => {});
  const logger = testLogger();
  const engine = fx.make({ connectionString: undefined, pool, logger });
  try {
    // "does not exist": the connection lost what pg prepared on it (as when the pooler gives the
    // client another server connection).
    await engine.getJob('1');
    await pool.query('DEALLOCATE ALL');
    const missing = await engine.getJob('1').catch((error: unknown) => error);
    expect((missing as { code?: string }).code).toBe('26000');
    // "already exists": the connection has a statement of that name that this client never prepared.
    await pool.query('PREPARE "pgq:pgqueue:job-events" AS SELECT 1');
    const existing = await engine.getJobEvents('1').catch((error: unknown) => error);
    expect((existing as { code?: string }).code).toBe('42P05');

    const warnings = logger.lines.filter((line) => line.includes('preparedStatements'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/warn: .*transaction (mode|pooling).*preparedStatements: false/);
  } finally {
    await engine.stop();
    await pool.end();
  }
});

test('preparedStatements is checked like every option', () => {
  expect(() => fx.make({ preparedStatements: 'no' as unknown as boolean })).toThrow(/Invalid option "preparedStatements": "no" is not a boolean/);
});

test("statement names fit PostgreSQL's 63-byte limit with the longest schema name, so none is cut short into another", async () => {
  const schema = `s${'x'.repeat(56)}`;
  const names = Object.values(createStore(schema).statements).flatMap((q) => (!q.planPerCall ? [q.name] : []));
  expect(names.filter((name) => Buffer.byteLength(name) > 63)).toEqual([]);
  expect(new Set(names).size).toBe(names.length);
  // Another schema gets other names: two engines on one pool never share a statement.
  const others = new Set(Object.values(createStore(`s${'y'.repeat(56)}`).statements).map((q) => q.name));
  expect(names.filter((name) => others.has(name))).toEqual([]);

  // And the engine runs on it: before, every statement whose cut name another had taken failed.
  const logger = testLogger();
  const engine = fx.make({ schema, logger });
  const done: string[] = [];
  engine.work('long-schema', async (job, ctx) => {
    await ctx.heartbeat();
    done.push(job.id);
  });
  await engine.start();
  const id = await engine.enqueue('long-schema', {});
  await waitForOutcome(engine, id, 'succeeded');
  await engine.stop();
  expect(done).toEqual([id]);
  expect(logger.lines).toEqual([]);
});
