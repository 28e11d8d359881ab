import pg from 'pg';
import type { PgQueue } from '../../lib/engine/index.js';
import { createStore } from '../../lib/engine/store/index.js';
import { explainStatement, lastSent, recordingPool, type PlanMode, type PlanNode, type SentStatement, type StatementPlan } from '../support/claim-plan.js';
import { engineFixture } from '../support/engine.js';

/**
 * Reads whose cost must not grow with what the queue retains (issue 11, D22 and D23). Succeeded
 * and cancelled jobs are history: `stats()` (every `/metrics` scrape and health check) must read
 * the live rows and the recent window, never the history. Dead jobs are listed and purged oldest
 * first a page or batch at a time: each one must read about what it returns, with or without a
 * queue or error code. Each read is explained (EXPLAIN (ANALYZE, BUFFERS), rolled back) as the
 * engine sends it, beside 10,000 and then 200,000 retained rows, planned as the engine has it
 * planned: a prepared statement both for its values and generically (PostgreSQL may switch to
 * that plan after five calls), a statement planned per call for its values. The bound is on
 * buffers and relative to the small case.
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
  const recording = recordingPool(fx.url, createStore('pgqueue'));
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

/**
 * Sorts of jobs rows: a page taken after sorting has read every row that matched, not just the
 * page. (A sort of the batch's own few ordering keys, to lock them in one order, is not one.)
 */
function sorts(plan: StatementPlan): string[] {
  const readsJobs = (node: PlanNode): boolean => node['Relation Name'] === 'jobs' || (node.Plans ?? []).some(readsJobs);
  return plan.nodes.filter((n) => n['Node Type'].endsWith('Sort') && readsJobs(n)).map((n) => n['Node Type']);
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

// Two layouts: which plan the planner prefers for a filter (and so which wrong one it could take)
// depends on what else the table holds and where, so each form of these statements that we
// measured and rejected fails in one of them (see listDeadPage in lib/engine/store/operator.ts).
describe.each([
  ['alone in the table', 0],
  ['after 200,000 jobs of history', LARGE],
] as const)('dead jobs, oldest first, %s', (_, history) => {
  let t: Awaited<ReturnType<typeof setUp>>;
  beforeAll(async () => {
    t = await setUp('flatdead');
    // Succeeded jobs of a busy queue, stored before the dead ones.
    if (history > 0) await t.fx.insertJobs('history', history, { status: 'succeeded', finishedAgoSeconds: 3_600 });
  }, 60_000);
  afterAll(() => t?.close());

  /**
   * Dead jobs in two queues, half each. The graveyard's died first, one in ten with the error
   * code RARE; the crypt's died a minute later, every other one RARE. A walk from the oldest that
   * filters by queue or code reads the graveyard's before it meets the first of the crypt's.
   */
  async function die(fx: Fixture, count: number, agoSeconds: number) {
    await fx.insertJobs('graveyard', count / 2, { status: 'dead', finishedAgoSeconds: agoSeconds + 60, errorCodes: [...Array<string>(9).fill('COMMON'), 'RARE'] });
    await fx.insertJobs('crypt', count / 2, { status: 'dead', finishedAgoSeconds: agoSeconds, errorCodes: ['RARE', 'COMMON'] });
    await fx.pool.query('ANALYZE pgqueue.jobs');
  }

  /** The modes a statement is planned in by the engine: both when prepared, its values' when planned per call. */
  const modesOf = (statement: SentStatement): readonly PlanMode[] => (statement.prepared ? MODES : ['custom']);

  const FILTERS = [{}, { queue: 'crypt' }, { errorCode: 'RARE' }, { queue: 'crypt', errorCode: 'RARE' }] as const;
  type Filter = (typeof FILTERS)[number];

  /** The cursor of the dead job halfway through those the filter matches: a page deep into the list. */
  async function middleCursor(fx: Fixture, filter: Filter): Promise<string> {
    const { rows } = await fx.pool.query<{ cursor: string }>(
      `SELECT finished_at::text || '|' || id AS cursor FROM pgqueue.job_rows
       WHERE status = 'dead' AND ($1::text IS NULL OR queue_name = $1) AND ($2::text IS NULL OR last_error_code = $2)
       ORDER BY finished_at, id OFFSET (SELECT count(*) / 2 FROM pgqueue.job_rows WHERE status = 'dead'
                                          AND ($1::text IS NULL OR queue_name = $1) AND ($2::text IS NULL OR last_error_code = $2)) LIMIT 1`,
      ['queue' in filter ? filter.queue : null, 'errorCode' in filter ? filter.errorCode : null],
    );
    return rows[0]!.cursor;
  }

  /** Plans of listDead's first page and of a page halfway through, per filter and plan mode. */
  async function listPlans() {
    const plans: { filter: Filter; page: 'first' | 'middle'; mode: PlanMode; returned: number; plan: StatementPlan }[] = [];
    for (const filter of FILTERS) {
      for (const page of ['first', 'middle'] as const) {
        const cursor = page === 'middle' ? await middleCursor(t.fx, filter) : undefined;
        let returned = 0;
        const statement = await t.sent(/:list-dead/, async (e) => {
          returned = (await e.listDead({ ...filter, cursor })).jobs.length;
        });
        for (const mode of modesOf(statement)) plans.push({ filter, page, mode, returned, plan: await t.explain(statement, mode) });
      }
    }
    return plans;
  }

  /** Plans of one batch of purgeDead (of everything dead until now), without and with a queue. */
  async function purgePlans() {
    const plans: { queue: string | undefined; mode: PlanMode; plan: StatementPlan }[] = [];
    for (const queue of [undefined, 'crypt']) {
      // A purge of what died before 1970 removes nothing and shows the statement the engine sends;
      // its plan is then explained for a cutoff that takes a full batch.
      const statement = await t.sent(/:purge-dead/, (e) => e.purgeDead({ olderThan: new Date(0), queue }));
      const values = statement.values.map((v) => (v instanceof Date ? new Date() : v));
      for (const mode of modesOf(statement)) plans.push({ queue, mode, plan: await t.explain(statement, mode, values) });
    }
    return plans;
  }

  test('each listDead page and each purgeDead batch reads about what it returns, with or without a queue or an error code, beside 10,000 and 200,000 dead jobs', async () => {
    const measure = async () => ({ list: await listPlans(), purge: await purgePlans() });
    await die(t.fx, SMALL, 86_400);
    const small = await measure();
    // Older than the first ones: the oldest pages are now among the new rows.
    await die(t.fx, LARGE - SMALL, 2 * 86_400);
    const large = await measure();

    const label = (p: { filter?: Filter; queue?: string; page?: string; mode: PlanMode }) => JSON.stringify({ ...p, plan: undefined });
    console.log(
      JSON.stringify({
        test: 'dead',
        retained: { small: SMALL, large: LARGE, history },
        listDead: large.list.map((l, i) => ({
          filter: l.filter,
          page: l.page,
          mode: l.mode,
          returned: l.returned,
          small: summary(small.list[i]!.plan),
          large: summary(l.plan),
        })),
        purgeDead: large.purge.map((p, i) => ({
          queue: p.queue ?? null,
          mode: p.mode,
          small: summary(small.purge[i]!.plan),
          large: summary(p.plan),
        })),
      }),
    );

    large.list.forEach((l, i) => {
      const before = small.list[i]!;
      expect(l.returned, label(l)).toBe(50);
      // Flat: twenty times the dead jobs cost a page what they did, give or take an index level.
      expect(l.plan.jobsBuffers, label(l)).toBeLessThanOrEqual(before.plan.jobsBuffers + SLACK);
      // The page's rows and nothing else: none read and thrown away, none sorted, none past the page.
      expect([...seqScans(l.plan), ...sorts(l.plan)], label(l)).toEqual([]);
      expect(l.plan.jobsRows, label(l)).toBe(l.returned);
      expect(l.plan.rowsRemovedByFilter, label(l)).toBe(0);
      expect(l.plan.jobsBuffers, label(l)).toBeLessThanOrEqual(l.returned + 2 * SLACK);
    });
    large.purge.forEach((p, i) => {
      const before = small.purge[i]!;
      expect(p.plan.jobsBuffers, label(p)).toBeLessThanOrEqual(before.plan.jobsBuffers + SLACK);
      expect(p.plan.totalBuffers, label(p)).toBeLessThanOrEqual(before.plan.totalBuffers + SLACK);
      expect([...seqScans(p.plan), ...sorts(p.plan)], label(p)).toEqual([]);
      expect(p.plan.rowsRemovedByFilter, label(p)).toBe(0);
      // The batch (500 by default) is found in order, then deleted by ctid: a buffer per row and
      // scan, and the index's few pages.
      expect(p.plan.jobsRows, label(p)).toBe(2 * 500);
      expect(p.plan.jobsBuffers, label(p)).toBeLessThanOrEqual(2 * 500 + 10 * SLACK);
    });
  }, 300_000);
});
