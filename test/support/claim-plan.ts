import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import type { Queries, QueryText } from '../../lib/engine/sql.js';

/**
 * Plans and timings of the engine's real statements (the text from createQueries), for the
 * backlog test (test/serial/crash/backlog-recovery.spec.ts). Every
 * statement runs inside a transaction that is rolled back, so nothing changes.
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
 * The claim's parameters as the worker sends them: queue, owner, limit, lease ms, max runtime ms,
 * max attempts, backoff base ms, backoff max ms; any later parameter the statement has is 0 (the
 * jobs taken oldest-first by the fairness policy: 0 is strict priority).
 */
export function claimParams(queries: Queries, queue: string, limit: number): unknown[] {
  const known = [queue, 'explainer', limit, 30_000, 60_000, 5, 1_000, 60_000];
  const count = Math.max(0, ...[...queries.claim.text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
  return Array.from({ length: count }, (_, i) => (i < known.length ? known[i] : 0));
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
  nodes: PlanNode[];
}

/** EXPLAIN (ANALYZE, BUFFERS) of `statement`, rolled back; buffers counted for `index`. */
export async function explainStatement(client: pg.ClientBase, statement: QueryText, params: unknown[], index: string): Promise<StatementPlan> {
  await client.query('BEGIN');
  try {
    const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${statement.text}`, params);
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
      rowsRemovedByFilter: scans.reduce((sum, n) => sum + (n['Rows Removed by Filter'] ?? 0), 0),
      nodes,
    };
  } finally {
    await client.query('ROLLBACK');
  }
}

export interface ClaimPlan extends StatementPlan {
  /** Buffers of the walk of the claimable index (index pages plus the candidates' heap pages). */
  claimableBuffers: number;
}

/** EXPLAIN (ANALYZE, BUFFERS) of the real claim statement, rolled back so nothing changes. */
export async function explainClaim(client: pg.ClientBase, queries: Queries, queue: string, limit: number): Promise<ClaimPlan> {
  const plan = await explainStatement(client, queries.claim, claimParams(queries, queue, limit), 'jobs_claimable_idx');
  return { ...plan, claimableBuffers: plan.indexBuffers };
}

/**
 * Round-trip times (ms) of `repeats` real claims, each in its own transaction that is rolled back,
 * sent as the named (prepared) statement the worker uses. A few untimed warm-ups go first.
 */
export async function timeClaims(client: pg.ClientBase, queries: Queries, queue: string, limit: number, repeats: number): Promise<number[]> {
  const values = claimParams(queries, queue, limit);
  const times: number[] = [];
  for (let i = -3; i < repeats; i++) {
    await client.query('BEGIN');
    try {
      const started = performance.now();
      const { rowCount } = await client.query({ name: queries.claim.name, text: queries.claim.text, values });
      if (i >= 0) times.push(performance.now() - started);
      if (rowCount !== limit) throw new Error(`a timed claim took ${rowCount} jobs, not ${limit}`);
    } finally {
      await client.query('ROLLBACK');
    }
  }
  return times;
}
