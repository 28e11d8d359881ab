import type pg from 'pg';
import { describe } from './config.js';
import { InvalidJobError } from './errors.js';
import { isQueueName } from './identifiers.js';
import { isJobDefinition, payloadToEnqueue, type JobDefinition } from './job-definition.js';
import { payloadJson } from './json.js';
import { FLOW_NOT_A_NODE, FLOW_OPTION_REFUSED, FLOW_TOO_LARGE, JOB_OPTION_INVALID, JOB_QUEUE_NAME_INVALID, QUEUE_NOT_DECLARED_FOR_ENQUEUE } from './messages.js';
import type { EnqueueOptions } from './producer.js';
import { transaction, type FlowRow, type Store } from './store/index.js';
import { captureTraceContext } from './tracing.js';
import type { ChildResult, Queryable } from './types.js';

/**
 * Flows (docs/flows.md): a parent job that runs only once every child has succeeded, and reads
 * their results. Checked whole before any SQL runs, inserted in one transaction.
 */

/** The most a flow child's result (its handler's return value, as JSON) may take. */
export const FLOW_RESULT_MAX_BYTES = 16 * 1024;
/** Jobs in one flow, at most: the flow is one transaction. */
export const FLOW_MAX_JOBS = 100_000;

/** Enqueue options a flow's jobs take (ordering keys and deduplication are not for flows). */
export type FlowJobOptions = Pick<EnqueueOptions, 'priority' | 'delayMs' | 'maxAttempts' | 'maxRuntimeMs' | 'group'>;

/** One job of a flow, and the jobs it waits for. */
export interface FlowNode<T = unknown> {
  queue: string | JobDefinition<T>;
  payload: T;
  options?: FlowJobOptions;
  /** Jobs that must all succeed (or be discarded) before this one runs; they may have children too. */
  children?: readonly FlowNode[];
  /**
   * A dead child fails this job (dead, code CHILD_DEAD) instead of holding it until an operator
   * replays or discards the child. Default false.
   */
  failOnDeadChild?: boolean;
}

/** The ids of a flow, shaped as it was given. */
export interface EnqueuedFlow {
  id: string;
  children: EnqueuedFlow[];
}

export type { ChildResult };

export interface FlowDeps {
  readonly db: Queryable;
  readonly pool: pg.Pool;
  readonly store: Store;
  readonly channel: string;
  readonly schedulerTopic: string;
  readonly maxPayloadBytes: number;
  readonly statementTimeoutMs: number;
  readonly isKnownQueue: (queue: string, db: Queryable) => Promise<boolean>;
}

interface Flat {
  row: Omit<FlowRow, 'parent'>;
  /** Index of its parent in the flattened list (-1: the root). */
  parent: number;
  level: number;
}

const ALLOWED = new Set(['priority', 'delayMs', 'maxAttempts', 'maxRuntimeMs', 'group']);
const INT32_MAX = 2_147_483_647;

/** Checks the whole flow (payloads through their definitions), and flattens it parents first. */
async function flatten(root: FlowNode, maxPayloadBytes: number): Promise<Flat[]> {
  const out: Flat[] = [];
  const visit = async (node: FlowNode, where: string, parent: number, level: number) => {
    if (node === null || typeof node !== 'object' || Array.isArray(node)) throw new InvalidJobError('INVALID_JOB_OPTION', FLOW_NOT_A_NODE(where, describe(node)));
    if (out.length >= FLOW_MAX_JOBS) throw new InvalidJobError('INVALID_JOB_OPTION', FLOW_TOO_LARGE(FLOW_MAX_JOBS));
    const definition = isJobDefinition(node.queue) ? node.queue : undefined;
    const queue = definition ? definition.queue : node.queue;
    if (!isQueueName(queue)) throw new InvalidJobError('INVALID_QUEUE_NAME', JOB_QUEUE_NAME_INVALID(where, describe(queue)));
    const payload = definition ? await payloadToEnqueue(definition, node.payload, where) : node.payload;
    const json = payloadJson(payload, `${where} (queue "${queue}")`, maxPayloadBytes);
    const options = (node.options ?? {}) as Record<string, unknown>;
    for (const name of Object.keys(options)) {
      if (!ALLOWED.has(name)) throw new InvalidJobError('INVALID_JOB_OPTION', FLOW_OPTION_REFUSED(where, name));
    }
    const bad = (option: string, value: unknown, expected: string) => new InvalidJobError('INVALID_JOB_OPTION', JOB_OPTION_INVALID(where, option, describe(value), expected));
    const { priority = 0, delayMs, maxAttempts, maxRuntimeMs, group } = options as FlowJobOptions;
    if (!Number.isInteger(priority) || priority < -1000 || priority > 1000) throw bad('priority', priority, 'an integer from -1000 to 1000');
    if (delayMs !== undefined && !(typeof delayMs === 'number' && Number.isFinite(delayMs) && delayMs >= 0)) throw bad('delayMs', delayMs, 'a finite number of milliseconds >= 0');
    if (maxAttempts !== undefined && !(Number.isInteger(maxAttempts) && maxAttempts >= 1 && maxAttempts <= INT32_MAX)) throw bad('maxAttempts', maxAttempts, 'an integer >= 1');
    if (maxRuntimeMs !== undefined && !(Number.isInteger(maxRuntimeMs) && maxRuntimeMs >= 1 && maxRuntimeMs <= INT32_MAX)) throw bad('maxRuntimeMs', maxRuntimeMs, 'an integer number of milliseconds >= 1');
    if (group !== undefined && !(typeof group === 'string' && group.length >= 1 && group.length <= 256)) throw bad('group', group, 'a string of 1-256 characters');
    if (node.children !== undefined && !Array.isArray(node.children)) throw bad('children', node.children, 'an array of flow nodes');
    if (node.failOnDeadChild !== undefined && typeof node.failOnDeadChild !== 'boolean') throw bad('failOnDeadChild', node.failOnDeadChild, 'true or false');
    const children = node.children ?? [];
    const index = out.length;
    out.push({
      row: {
        q: queue,
        json,
        pr: priority,
        d: delayMs === undefined ? null : Math.round(delayMs),
        ma: maxAttempts ?? null,
        mr: maxRuntimeMs ?? null,
        tc: captureTraceContext(),
        v: definition?.version ?? null,
        g: group ?? null,
        waits: children.length > 0,
        failOnDead: node.failOnDeadChild ?? false,
      },
      parent,
      level,
    });
    for (const [i, child] of children.entries()) await visit(child, `${where}.children[${i}]`, index, level + 1);
  };
  await visit(root, 'flow', -1, 0);
  return out;
}

/**
 * Inserts a flow in one transaction (the caller's, with `client`): level by level, parents first,
 * so each child names its parent. Nothing is written unless all of it is.
 */
export async function enqueueFlow(deps: FlowDeps, root: FlowNode, call: { client?: Queryable } = {}): Promise<EnqueuedFlow> {
  const flat = await flatten(root, deps.maxPayloadBytes);
  const insert = async (db: Queryable): Promise<EnqueuedFlow> => {
    for (const queue of new Set(flat.map((f) => f.row.q))) {
      if (!(await deps.isKnownQueue(queue, db))) throw new InvalidJobError('UNKNOWN_QUEUE', QUEUE_NOT_DECLARED_FOR_ENQUEUE(queue));
    }
    const ids = new Array<string>(flat.length);
    const depth = Math.max(...flat.map((f) => f.level));
    for (let level = 0; level <= depth; level++) {
      const members = flat.flatMap((f, i) => (f.level === level ? [i] : []));
      const rows: FlowRow[] = members.map((i) => ({ ...flat[i]!.row, parent: flat[i]!.parent === -1 ? null : ids[flat[i]!.parent]! }));
      const inserted = await deps.store.insertFlowLevel(db, { rows, channel: deps.channel, schedulerTopic: deps.schedulerTopic });
      for (const [k, i] of members.entries()) ids[i] = inserted[k]!;
    }
    const shaped: EnqueuedFlow[] = flat.map((_, i) => ({ id: ids[i]!, children: [] }));
    for (const [i, f] of flat.entries()) if (f.parent !== -1) shaped[f.parent]!.children.push(shaped[i]!);
    return shaped[0]!;
  };
  if (call.client) return insert(call.client);
  return transaction(deps.pool, (client) => insert(client), { statementTimeoutMs: deps.statementTimeoutMs });
}
