import fc from 'fast-check';
import { afterAll, beforeAll, describe, test } from 'vitest';
import { PgQueue } from '../../lib/engine/index.js';
import { engineFixture, testLogger } from '../support/engine.js';
import { STATS, newModel, newReal, OPS, QUEUE, replayOps, resetDatabase, type Op, type Real } from './engine-model.js';

/**
 * Randomized model-based runs of the real engine (see engine-model.ts and docs/how-we-know.md).
 * `npm test` runs MODEL_RUNS_DEFAULT seeded runs; `npm run test:model -- --runs N --seed S` runs
 * more (scripts/model.mjs sets MODEL_RUNS and MODEL_SEED).
 */
const MODEL_RUNS_DEFAULT = 25;
const MODEL_SEED_DEFAULT = 1414;
const runs = Number(process.env.MODEL_RUNS ?? MODEL_RUNS_DEFAULT);
const seed = Number(process.env.MODEL_SEED ?? MODEL_SEED_DEFAULT);
const MAX_COMMANDS = 150;

let fixture: Awaited<ReturnType<typeof engineFixture>>;
let real: Real;

beforeAll(async () => {
  fixture = await engineFixture('model');
  // Never started: no worker loop, no reaper, scheduler, pruner or listener timer. Every pass
  // runs once, when a command says so.
  const engine = new PgQueue({ connectionString: fixture.url, logger: testLogger() });
  await engine.declareQueues([QUEUE]);
  real = newReal(engine, fixture.url);
});

afterAll(async () => {
  await real?.engine.stop(1_000);
  await fixture?.close();
});

describe('the engine against its reference model', () => {
  test(
    `${runs} generated runs of up to ${MAX_COMMANDS} operations (seed ${seed})`,
    async () => {
      await fc.assert(
        fc.asyncProperty(fc.commands(OPS, { maxCommands: MAX_COMMANDS, size: 'max' }), async (commands) => {
          await resetDatabase(real);
          await fc.asyncModelRun(() => ({ model: newModel(), real }), commands);
        }),
        { numRuns: runs, seed, ...(process.env.MODEL_PATH ? { path: process.env.MODEL_PATH } : {}) },
      );
      if (process.env.MODEL_STATS === '1') console.log([...STATS].sort().map(([k, n]) => `${k}: ${n}`).join('\n'));
    },
    Math.max(120_000, runs * 20_000),
  );
});

/**
 * Lists the generated runs found themselves, each with a defect of issue 11 put back
 * (`npm run test:model -- --mutants`; fast-check's shrunk list, seed 7), kept as fixed regression
 * tests: each passes on the engine and fails with its mutant.
 */
const enqueue: Op = { op: 'enqueue', key: null, priority: 0, delayed: false, maxAttempts: null };

/** D16: with outcomes told by id (`i.id IN (SELECT id FROM done)`), the stale attempt 1:1 is told "applied". */
test('regression D16: a stale and a current completion of one job in one batch are told apart', async () => {
  await replayOps(real, [
    enqueue,
    { op: 'claim', worker: 'w0', limit: 1 },
    { op: 'expireLease', job: 0 },
    { op: 'reap' },
    { op: 'promote' },
    { op: 'claim', worker: 'w0', limit: 1 },
    { op: 'complete', worker: 'w0', picks: [0, 1, 2, 3] },
  ]);
});

/** No token check in complete-many: the same worker's stale attempt completes the job it claimed again. */
test('regression no-token: a stale attempt of the worker that claimed the job again completes nothing', async () => {
  await replayOps(real, [
    enqueue,
    { op: 'claim', worker: 'w2', limit: 1 },
    { op: 'expireLease', job: 0 },
    { op: 'reap' },
    { op: 'promote' },
    { op: 'claim', worker: 'w2', limit: 1 },
    { op: 'complete', worker: 'w2', picks: [3, 3] },
  ]);
});

/** D9: a cancel that clears a running job's lease and lets go of its key at once. */
test('regression D9: a cancelled running job keeps its lease until its attempt is over', async () => {
  await replayOps(real, [enqueue, { op: 'claim', worker: 'w0', limit: 1 }, { op: 'cancel', job: 0 }]);
});

/** The reaper ends a cancelled attempt whose lease ran out (without it, its key stays taken). */
test('regression: the reaper ends a cancelled attempt whose lease ran out', async () => {
  await replayOps(real, [enqueue, { op: 'claim', worker: 'w0', limit: 1 }, { op: 'expireLease', job: 0 }, { op: 'cancel', job: 0 }, { op: 'reap' }]);
});

/**
 * A harness defect, not the engine's: the check read the step's audit rows `ORDER BY id` where
 * `id` was the selected id::text, so row 10 sorted before row 9, the step's last-seen id went back
 * to 9 and row 10 was reported again, one step late, as unexpected. Found by `--runs 150 --seed
 * 1414`; this list (its shape, shrunk) fails on the text sort.
 */
test('regression harness: audit rows past the ninth are read in id order', async () => {
  await replayOps(real, [
    enqueue,
    enqueue,
    { op: 'claim', worker: 'w1', limit: 2 },
    { op: 'fail', worker: 'w1', pick: 1, error: 'permanent' },
    { op: 'complete', worker: 'w1', picks: [1] },
    { op: 'complete', worker: 'w1', picks: [1] },
    { op: 'expireLease', job: 0 },
    { op: 'reap' },
    { op: 'complete', worker: 'w1', picks: [0, 1] },
    { op: 'replay', job: 0 },
    { op: 'fail', worker: 'w1', pick: 1, error: 'permanent' },
    { op: 'complete', worker: 'w1', picks: [0, 1, 2, 3] },
    enqueue,
  ]);
});
