import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { ClaimParams, StatementText, Store } from '../../lib/engine/store/index.js';

/**
 * Plans and timings of the engine's real statements (the text from createStore, or as the engine
 * sent it: recordingPool), for the backlog test (test/serial/crash/backlog-recovery.spec.ts) and
 * the reads test (test/serial/flat-reads.spec.ts). Every statement runs inside a transaction that
 * is rolled back, so nothing changes.
 */

export interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Relation Name'?: string;
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

export function planNodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(planNodes)];
}

/**
 * The claim's parameters as a worker sends them, for `queue` and `limit`; none taken oldest-first
 * (strict priority), unless `overrides` says otherwise.
 */
export function claimParams(queue: string, limit: number, overrides: Partial<ClaimParams> = {}): ClaimParams {
  return { queue, owner: 'explainer', limit, leaseMs: 30_000, maxRuntimeMs: 60_000, maxAttempts: 5, backoffBaseMs: 1_000, backoffMaxMs: 60_000, oldestFirst: 0, ...overrides };
}

/** The claim's positional values, from its named parameters (as the store sends them). */
export function claimValues(store: Store, queue: string, limit: number): unknown[] {
  return store.statements.claim.values(claimParams(queue, limit));
}

export interface StatementPlan {
  /** Execution Time reported by EXPLAIN ANALYZE, ms. */
  ms: number;
  /** Scans of the jobs table, e.g. "Index Scan on jobs_claimable_idx". */
  scans: string[];
  /** Buffers (hit + read) of the scans of `index`, and of every scan of the jobs table. */
  indexBuffers: number;
  jobsBuffers: number;
  /** Rows the scans of `index` returned, and rows they read and threw away. */
  indexRows: number;
  rowsRemovedByFilter: number;
  /** Rows every scan of the jobs table returned (summed over loops). */
  jobsRows: number;
  /** Buffers of the whole statement (every table and index it touched). */
  totalBuffers: number;
  nodes: PlanNode[];
}

/**
 * Which plan to explain. `custom`: planned for these parameter values, as the first executions
 * of a prepared statement are. `generic`: planned once for any values, as PostgreSQL may choose
 * for a named statement after five executions (plan_cache_mode = auto), so a statement whose
 * plan is good only for some values shows it here.
 */
export type PlanMode = 'custom' | 'generic';

/** EXPLAIN (ANALYZE, BUFFERS) of `statement`, rolled back; buffers counted for `index`. */
export async function explainStatement(
  client: pg.ClientBase,
  statement: StatementText,
  params: unknown[],
  index: string,
  mode: PlanMode = 'custom',
): Promise<StatementPlan> {
  await client.query('BEGIN');
  try {
    let explained: string;
    if (mode === 'generic') {
      // PREPARE is not transactional: the statement is deallocated below, whatever happens.
      await client.query(`SET LOCAL plan_cache_mode = force_generic_plan`);
      await client.query(`PREPARE pgq_explained AS ${statement.text}`);
      // EXPLAIN EXECUTE is a utility statement: it takes no bound parameters, so the values are
      // written as literals, converted as the driver would have sent them.
      const literal = (value: unknown) => {
        const text = (pg as unknown as { utils: { prepareValue(v: unknown): string | null } }).utils.prepareValue(value);
        return text === null ? 'NULL' : client.escapeLiteral(text);
      };
      explained = `EXECUTE pgq_explained(${params.map(literal).join(', ')})`;
    } else {
      explained = statement.text;
    }
    const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${explained}`, mode === 'generic' ? [] : params);
    const [{ Plan, 'Execution Time': ms }] = rows[0]['QUERY PLAN'] as [{ Plan: PlanNode; 'Execution Time': number }];
    const nodes = planNodes(Plan);
    const scans = nodes.filter((n) => n['Relation Name'] === 'jobs' && n['Node Type'] !== 'ModifyTable');
    const onIndex = scans.filter((n) => n['Index Name'] === index);
    const buffers = (list: PlanNode[]) => list.reduce((sum, n) => sum + n['Shared Hit Blocks'] + n['Shared Read Blocks'], 0);
    return {
      ms,
      scans: scans.map((n) => `${n['Node Type']}${n['Index Name'] ? ` on ${n['Index Name']}` : ''}`),
      indexBuffers: buffers(onIndex),
      jobsBuffers: buffers(scans),
      indexRows: onIndex.reduce((sum, n) => sum + (n['Actual Rows'] ?? 0) * (n['Actual Loops'] ?? 1), 0),
      jobsRows: scans.reduce((sum, n) => sum + (n['Actual Rows'] ?? 0) * (n['Actual Loops'] ?? 1), 0),
      rowsRemovedByFilter: scans.reduce((sum, n) => sum + (n['Rows Removed by Filter'] ?? 0), 0),
      totalBuffers: Plan['Shared Hit Blocks'] + Plan['Shared Read Blocks'],
      nodes,
    };
  } finally {
    await client.query('ROLLBACK');
    if (mode === 'generic') await client.query(`DEALLOCATE pgq_explained`).catch(() => {});
  }
}

export interface ClaimPlan extends StatementPlan {
  /** Buffers of the walk of the claimable index (index pages plus the candidates' heap pages). */
  claimableBuffers: number;
}

/** EXPLAIN (ANALYZE, BUFFERS) of the real claim statement, rolled back so nothing changes. */
export async function explainClaim(client: pg.ClientBase, store: Store, queue: string, limit: number): Promise<ClaimPlan> {
  const plan = await explainStatement(client, store.statements.claim, claimValues(store, queue, limit), 'jobs_claimable_idx');
  return { ...plan, claimableBuffers: plan.indexBuffers };
}

/**
 * Round-trip times (ms) of `repeats` real claims, each in its own transaction that is rolled back,
 * sent as the named (prepared) statement the worker uses. A few untimed warm-ups go first.
 */
export async function timeClaims(client: pg.ClientBase, store: Store, queue: string, limit: number, repeats: number): Promise<number[]> {
  const values = claimValues(store, queue, limit);
  const times: number[] = [];
  for (let i = -3; i < repeats; i++) {
    await client.query('BEGIN');
    try {
      const started = performance.now();
      const { rowCount } = await client.query({ name: store.statements.claim.name, text: store.statements.claim.text, values });
      if (i >= 0) times.push(performance.now() - started);
      if (rowCount !== limit) throw new Error(`a timed claim took ${rowCount} jobs, not ${limit}`);
    } finally {
      await client.query('ROLLBACK');
    }
  }
  return times;
}

/** A statement as the engine sent it: its name and text, the values it was bound to, and whether it was prepared. */
export interface SentStatement extends StatementText {
  readonly values: unknown[];
  /** False when it was sent unnamed, so planned for its values (StatementText.planPerCall). */
  readonly prepared: boolean;
}

/**
 * A pool for an engine (`{ pool }`) that records every statement of `store` the engine sends,
 * through `pool.query` or a client it checked out, so that a test can explain exactly the
 * statement (and the variant of it) that the engine chose for a call, planned as the engine had it
 * planned. Statements sent unnamed are named from `store` by their text.
 */
export function recordingPool(connectionString: string, store: Store): { pool: pg.Pool; sent: SentStatement[] } {
  const byText = new Map(Object.values(store.statements).map((statement: StatementText) => [statement.text, statement]));
  const sent: SentStatement[] = [];
  class RecordingClient extends pg.Client {
    // Every overload of Client.query goes through here; only the engine's statements are recorded.
    override query(...args: unknown[]): never {
      const [config] = args as [{ name?: unknown; text?: unknown; values?: unknown[] } | string];
      const query = typeof config === 'object' && config !== null && typeof config.text === 'string' ? byText.get(config.text) : undefined;
      if (query && typeof config === 'object') sent.push({ ...query, values: config.values ?? [], prepared: typeof config.name === 'string' });
      return (super.query as (...a: unknown[]) => never)(...args);
    }
  }
  const pool = new pg.Pool({ connectionString, Client: RecordingClient, max: 4 });
  pool.on('error', () => {});
  return { pool, sent };
}

/** The last statement recorded whose name ends with `:${name}` (e.g. 'queue-stats') or matches, or an error. */
export function lastSent(sent: readonly SentStatement[], name: string | RegExp): SentStatement {
  const match = [...sent].reverse().find((s) => (typeof name === 'string' ? s.name.endsWith(`:${name}`) : name.test(s.name)));
  if (!match) throw new Error(`no statement named ${String(name)} was sent (sent: ${[...new Set(sent.map((s) => s.name))].join(', ')})`);
  return match;
}
