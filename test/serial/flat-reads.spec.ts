import pg from 'pg';
import type { PgQueue } from '../../lib/engine/index.js';
import { createQueries } from '../../lib/engine/sql.js';
import { explainStatement, lastSent, recordingPool, type PlanMode, type SentStatement, type StatementPlan } from '../support/claim-plan.js';
import { engineFixture } from '../support/engine.js';

/**
 * Reads whose cost must not grow with what the queue retains (issue 11, D22). Succeeded and
 * cancelled jobs are history: `stats()` (every `/metrics` scrape and health check) must read the
 * live rows and the recent window, never the history. The statement is explained (EXPLAIN
 * (ANALYZE, BUFFERS), rolled back) as the engine sends it, beside 10,000 and then 200,000 retained
 * rows, both for its values and generically (PostgreSQL may switch a prepared statement to that
 * plan after five calls). The bound is on buffers and relative to the small case.
 */

const SMALL = 10_000;
const LARGE = 200_000;
const MODES: readonly PlanMode[] = ['custom', 'generic'];
/** A deeper level of an index (or two) between 10,000 and 200,000 rows; never a growing range. */
const SLACK = 5;

type Fixture = Awaited<ReturnType<typeof engineFixture>>;

/** A database of its own, an engine whose statements are recorded, and a client to explain them. */
async function setUp(label: string) {
  const fx = await engineFixture(label);
  const recording = recordingPool(fx.url, createQueries('pgqueue'));
  const engine = fx.make({ connectionString: undefined, pool: recording.pool });
  const client = new pg.Client({ connectionString: fx.url });
  await client.connect();
  return {
    fx,
    engine,
    client,
    /** Runs `call` and returns the statement it sent whose name matches. */
    async sent(name: string | RegExp, call: (engine: PgQueue) => Promise<unknown>): Promise<SentStatement> {
      recording.sent.length = 0;
      await call(engine);
      return lastSent(recording.sent, name);
    },
    async explain(statement: SentStatement, mode: PlanMode, values = statement.values, index = ''): Promise<StatementPlan> {
      return explainStatement(client, statement, values, index, mode);
    },
    async close() {
      await client.end();
      await fx.close();
      await recording.pool.end();
    },
  };
}

/** Sequential scans of jobs: they read every row the table keeps. */
function seqScans(plan: StatementPlan): string[] {
  return plan.scans.filter((scan) => scan.startsWith('Seq Scan'));
}

const summary = (plan: StatementPlan) => ({ jobsBuffers: plan.jobsBuffers, totalBuffers: plan.totalBuffers, jobsRows: plan.jobsRows, scans: plan.scans });

describe('stats() beside retained history', () => {
  let t: Awaited<ReturnType<typeof setUp>>;
  beforeAll(async () => {
    t = await setUp('flatstats');
  }, 60_000);
  afterAll(() => t?.close());

  /** History: succeeded and cancelled jobs that finished a day ago, far outside the recent window. */
  async function retain(fx: Fixture, count: number) {
    await fx.insertJobs('history', (count * 9) / 10, { status: 'succeeded', finishedAgoSeconds: 86_400 });
    await fx.insertJobs('history', count / 10, { status: 'cancelled', finishedAgoSeconds: 86_400 });
    await fx.pool.query('ANALYZE pgqueue.jobs');
  }

  test('reads the same buffers beside 10,000 and 200,000 retained finished jobs, and counts live jobs exactly and finished ones over the window', async () => {
    const { fx, engine } = t;
    // The live rows of the queue, one of each kind stats reports.
    await fx.insertJobs('history', 3); // pending, claimable
    await engine.enqueueMany(Array.from({ length: 3 }, () => ({ queue: 'history', payload: {}, orderingKey: 'k' }))); // 1 head + 2 waiting
    await fx.insertJobs('history', 2, { status: 'scheduled', availableInSeconds: 3_600 });
    await fx.insertJobs('history', 2, { status: 'running' });
    await fx.pool.query(`UPDATE pgqueue.jobs SET lease_expires_at = now() + interval '2 seconds' WHERE id = (SELECT min(id) FROM pgqueue.jobs WHERE status = 'running')`);
    await fx.insertJobs('history', 4, { status: 'dead', finishedAgoSeconds: 3_600 });
    await fx.pool.query(`UPDATE pgqueue.jobs SET ordering_key = 'blocked' WHERE id = (SELECT min(id) FROM pgqueue.jobs WHERE status = 'dead')`);
    // Finished within the default window (60 s), and two minutes ago (only in a 5-minute one).
    await fx.insertJobs('history', 5, { status: 'succeeded', finishedAgoSeconds: 1 });
    await fx.insertJobs('history', 2, { status: 'cancelled', finishedAgoSeconds: 1 });
    await fx.insertJobs('history', 3, { status: 'succeeded', finishedAgoSeconds: 120 });
    await retain(fx, SMALL);

    const statement = await t.sent('queue-stats', (e) => e.stats());
    const explainAll = () => Promise.all(MODES.map((mode) => t.explain(statement, mode, statement.values, 'jobs_finished_idx')));
    const small = await explainAll();
    await retain(fx, LARGE - SMALL);
    const large = await explainAll();
    // Throughput: another queue finished 1,000 jobs within the window. Its cost is the window's rows.
    await fx.insertJobs('busy', 1_000, { status: 'succeeded', finishedAgoSeconds: 10 });
    await fx.pool.query('ANALYZE pgqueue.jobs');
    const busy = await explainAll();
    const finishedIndex = (plan: StatementPlan) => ({ rows: plan.indexRows, buffers: plan.indexBuffers });
    console.log(
      JSON.stringify({
        test: 'stats',
        retained: { small: SMALL, large: LARGE },
        plans: MODES.map((mode, i) => ({ mode, small: summary(small[i]!), large: summary(large[i]!), large1000InWindow: summary(busy[i]!) })),
        finishedIndex: MODES.map((mode, i) => ({ mode, small: finishedIndex(small[i]!), large: finishedIndex(large[i]!), large1000InWindow: finishedIndex(busy[i]!) })),
      }),
    );

    MODES.forEach((mode, i) => {
      // Flat: twenty times the history costs what the small one did, give or take an index level.
      expect(large[i]!.jobsBuffers, mode).toBeLessThanOrEqual(small[i]!.jobsBuffers + SLACK);
      expect(large[i]!.totalBuffers, mode).toBeLessThanOrEqual(small[i]!.totalBuffers + SLACK);
      expect(seqScans(large[i]!), mode).toEqual([]);
      // The same rows, none of the history: the live ones and the window's 7.
      expect(large[i]!.jobsRows, mode).toBe(small[i]!.jobsRows);
      expect(large[i]!.indexRows, mode).toBe(7);
      // The finished index yields the window's rows of every queue and no others: its range is
      // the window, queue_name is read from them (an index with queue_name would save nothing:
      // just-finished rows are on pages not yet all-visible, so their heap is read anyway).
      expect(busy[i]!.indexRows, mode).toBe(1_007);
      const finishedScans = busy[i]!.nodes.filter((n) => n['Index Name'] === 'jobs_finished_idx');
      expect(finishedScans.reduce((sum, n) => sum + (n['Rows Removed by Filter'] ?? 0), 0), mode).toBe(0);
    });

    const stats = await engine.stats();
    const queue = stats.queues.find((q) => q.queue === 'history')!;
    expect(queue.counts).toEqual({ scheduled: 2, pending: 6, running: 2, dead: 4, recent: { succeeded: 5, cancelled: 2 } });
    expect(stats.recentWindowMs).toBe(60_000);
    expect(queue.blockedKeys).toBe(1);
    expect(queue.runningNearExpiry).toBe(1);
    expect(queue.oldestDeadAgeMs).toBeGreaterThanOrEqual(3_600_000);
    expect(stats.queues.find((q) => q.queue === 'busy')!.counts).toEqual({ scheduled: 0, pending: 0, running: 0, dead: 0, recent: { succeeded: 1_000, cancelled: 0 } });
    const wider = await engine.stats({ recentWindowMs: 300_000 });
    expect(wider.queues.find((q) => q.queue === 'history')!.counts.recent).toEqual({ succeeded: 8, cancelled: 2 });
    expect(wider.recentWindowMs).toBe(300_000);
  }, 300_000);
});
