#!/usr/bin/env node
// npm run bench [-- --runs N] [--quick] [--json] [--peer pg-boss,graphile-worker] [--diag] [--only a,b] [--topology t1,t2]
//
// Enqueue throughput, processing throughput of a no-op handler, and idle pickup latency of the
// engine (dist/engine), optionally beside peers, in a database of its own (bench_<random>) on the
// server in DATABASE_URL, dropped at the end. Every measurement runs in a fresh schema; each figure
// is the median of --runs runs (min–max beside it). See bench/README.md.
import path from 'node:path';
import { parseArgs } from 'node:util';
import { pgBouncerVersion, startPgBouncer } from '../scripts/pgbouncer.mjs';
import { benchContext, contextLines, finishContext } from './lib/context.mjs';
import { createBenchDatabase, dropOnSignals, resetBetweenRuns } from './lib/db.mjs';
import { summarize } from './lib/stats.mjs';
import ours, { loadEngine } from './ours.mjs';
import { enqueueBulk, enqueueSingle, latency, processing, processingProcesses } from './scenarios.mjs';
import { PEERS, loadSystem } from './systems.mjs';

/**
 * How the engine reaches the server (docs/deployment.md). `pooler`: a PgBouncer this run starts
 * in front of DATABASE_URL's server, in that pool_mode; `engine`: the engine options the topology
 * needs; `listenDirect`: LISTEN on a direct connection (listenConnectionString).
 */
const TOPOLOGIES = {
  direct: { engine: {} },
  // Direct, every statement unnamed: the cost of preparedStatements: false without a pooler's hop.
  'direct-unnamed': { engine: { preparedStatements: false } },
  // Direct, events.crossProcess on: what the cross-process events cost, interleaved with direct
  // (the same as the *_events scenario variants, which run after their plain scenario instead).
  'direct-events': { engine: { events: { crossProcess: true } } },
  'pgbouncer-session': { pooler: 'session', engine: {} },
  'pgbouncer-transaction': { pooler: 'transaction', engine: { preparedStatements: false }, listenDirect: true },
};

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    quick: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    peer: { type: 'string' },
    diag: { type: 'boolean', default: false },
    only: { type: 'string' },
    'max-seconds': { type: 'string' },
    topology: { type: 'string', default: 'direct' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

if (args.help) {
  process.stdout.write(`Usage: npm run bench -- [options]
  --runs N          runs per figure; the median is reported (default 3)
  --quick           smaller sizes (a smoke test, not a measurement)
  --json            one JSON object per figure and system on stdout instead of the table
  --peer LIST       comma-separated peers measured too, interleaved (ours, peer 1, peer 2, ours, …),
                    each with its ratio ours/peer: pg-boss, graphile-worker, or engine:P (A/B:
                    another build of the engine, P = its dist/engine/index.js)
  --diag            per-run details on stderr (claim batches, statements, pool waits, CPU)
  --only LIST       comma-separated scenarios (default: the headline set, marked *):
                    enqueue_single*, enqueue_bulk*, process_tuned*, process_tuned_2p*,
                    process_defaults*, latency*, process_pf10, process_pf100, process_pf500, and the
                    engine-only variants at prefetch 100: process_strict, process_keyed, process_defined,
                    process_flow, process_fair100, process_group{1,100,10000}_limit1, process_group2_rate100, process_flow_children,
                    enqueue_single_defined, enqueue_single_unique, enqueue_single_debounced,
                    process_insert, process_complete_tx, process_effect, process_retry; and
                    process_tuned_events, process_pf100_events (events.crossProcess on);
                    "all" for every one
  --max-seconds S   cap of one processing run (default 60, 20 with --quick)
  --topology LIST   comma-separated ways for the engine to reach the server, each measured as a
                    system of its own, interleaved: direct (default), direct-unnamed
                    (preparedStatements: false), direct-events (events.crossProcess: true),
                    pgbouncer-session, pgbouncer-transaction
                    (preparedStatements: false, LISTEN direct). The pgbouncer ones start a
                    PgBouncer of their own in front of DATABASE_URL's server (Debian: pgbouncer).
`);
  process.exit(0);
}

const runs = Number(args.runs);
if (!Number.isInteger(runs) || runs < 1) fail('--runs must be a positive integer');
const peerNames = args.peer === undefined ? [] : [...new Set(args.peer.split(',').map((p) => p.trim()).filter(Boolean))];
for (const name of peerNames) {
  if (!PEERS[name] && !name.startsWith('engine:')) {
    fail(`unknown --peer "${name}" (known: ${Object.keys(PEERS).join(', ')}, or engine:/path/to/dist/engine/index.js)`);
  }
}
const serverUrl = process.env.DATABASE_URL;
if (!serverUrl) fail('DATABASE_URL is not set (npm run bench starts a throwaway PostgreSQL when it is unset)');
const topologies = [...new Set(args.topology.split(',').map((t) => t.trim()))];
for (const t of topologies) if (!TOPOLOGIES[t]) fail(`unknown --topology "${t}" (known: ${Object.keys(TOPOLOGIES).join(', ')})`);
const foreignPeer = peerNames.find((name) => !name.startsWith('engine:'));
if (foreignPeer && (topologies.length > 1 || topologies[0] !== 'direct')) {
  fail(`--peer ${foreignPeer} is measured direct only; --topology goes with the engine (and --peer engine:…)`);
}
if (peerNames.length && topologies.length > 1) fail('--peer compares systems in one topology: give one --topology with it');

const sizes = args.quick
  ? { single: 1_000, bulk: 10_000, process: 10_000, samples: 100, maxSeconds: 20 }
  : { single: 5_000, bulk: 50_000, process: 50_000, samples: 300, maxSeconds: 60 };
if (args['max-seconds'] !== undefined) sizes.maxSeconds = Number(args['max-seconds']);
const CONCURRENCY = 10;
/** Single enqueue calls in flight at once (16: the issue-15 comparison's producer). */
const IN_FLIGHT = 16;
/** Jobs per enqueueMany call, for enqueue.bulk and for preloading the processing runs. */
const BATCH = 1_000;
/** Worker processes of process.c10.tuned.2proc. */
const PROCESSES = 2;

/** PgBouncers of this run, by pool_mode (started on first use; stopped at the end, or by their watchdog). */
const bouncers = new Map();
async function bouncer(poolMode) {
  if (!bouncers.has(poolMode)) {
    // Session pooling needs a server connection per client: the engine's pool and its listener fit.
    bouncers.set(poolMode, await startPgBouncer({ upstream: serverUrl, poolMode, settings: { default_pool_size: 20 } }));
  }
  return bouncers.get(poolMode);
}

/**
 * `system` reaching the server the topology's way. `resolveOpen(options)`: the options its open()
 * gets (the URL, the engine options the topology needs), also what a forked worker process of
 * it passes to the same system's open().
 */
function inTopology(system, name, alone) {
  const topology = TOPOLOGIES[name];
  if (name === 'direct' && alone) return { ...system, resolveOpen: async (options) => options };
  const resolveOpen = async (options) => {
    const url = topology.pooler ? (await bouncer(topology.pooler)).via(options.url) : options.url;
    const engineOptions = { ...options.engineOptions, ...topology.engine, ...(topology.listenDirect ? { listenConnectionString: options.url } : {}) };
    return { ...options, url, engineOptions };
  };
  return {
    ...system,
    key: alone ? system.key : `${system.key}_${name.replace(/-/g, '_')}`,
    label: alone ? `${system.label}, ${name}` : name,
    topology: name,
    resolveOpen,
    open: async (options) => system.open(await resolveOpen(options)),
  };
}

const systems = topologies.map((t) => inTopology(ours, t, topologies.length === 1));
for (const name of peerNames) {
  if (name.startsWith('engine:')) {
    const enginePath = name.slice('engine:'.length);
    // …/<build>/dist/engine/index.js → "engine <build>"
    const build = path.basename(path.resolve(enginePath, '..', '..', '..'));
    const others = systems.filter((s) => s.key.startsWith('other')).length;
    const key = others ? `other${others + 1}` : 'other';
    systems.push(inTopology(await loadEngine(enginePath, { key, label: `engine ${build}` }), topologies[0], true));
  } else {
    systems.push(inTopology(await loadSystem({ peer: name }), 'direct', true));
  }
}
/** The engine's own systems (one per topology): every check must pass for them. */
const mustPass = new Set(systems.slice(0, topologies.length));

const checks = [];
/** name → { unit, better, params, values: { systemKey: number[] }, capped: { systemKey: number } } */
const figures = new Map();
function figure(name, unit, better, params, scenario) {
  if (!figures.has(name)) figures.set(name, { name, unit, better, params, scenario, values: {}, capped: {} });
  return figures.get(name);
}

/**
 * The cross-process events variants: every job event of the worker published through NOTIFY
 * (events.crossProcess: true, the most it sends), and a no-op cluster listener, so the process
 * also decodes what comes back on its own LISTEN connection (its own echo, skipped), as a process
 * of a fleet hears the others'.
 */
const EVENTS_VARIANT = { engineOptions: { events: { crossProcess: true } } };
const EVENTS_DESCRIPTION = 'no-op, events.crossProcess: true (claimed and succeeded of every job published through NOTIFY) and a cluster listener';

/**
 * The scenarios, in the order they run. `headline`: run when --only is not given (the figures of
 * the issue-15 comparison). `settings`: how each system's worker is configured beyond its
 * concurrency (bench/scenarios.mjs; each adapter documents its mapping); the systems' open()
 * gets it too (pg-boss chooses LISTEN/NOTIFY there).
 */
const scenarios = [
  {
    key: 'enqueue_single',
    headline: true,
    declare: () => figure('enqueue.single', 'jobs/s', 'higher', { jobs: sizes.single, inFlight: IN_FLIGHT }),
    run: (sys) => enqueueSingle(sys, { jobs: sizes.single, inFlight: IN_FLIGHT }),
  },
  {
    // Engine only, against enqueue.single: the same calls through a defineJob with a zod schema.
    key: 'enqueue_single_defined',
    variant: true,
    declare: () => figure('enqueue.single.defined', 'jobs/s', 'higher', { jobs: sizes.single, inFlight: IN_FLIGHT, schema: 'zod: { i: int }' }),
    run: async (sys) => {
      const result = await enqueueSingle({ ...sys, enqueue: sys.enqueueDefined }, { jobs: sizes.single, inFlight: IN_FLIGHT });
      return { ...result, figures: { 'enqueue.single.defined': result.figures['enqueue.single'] } };
    },
  },
  {
    // Engine only, against enqueue.single: the same calls, each with a unique key of its own.
    key: 'enqueue_single_unique',
    variant: true,
    declare: () => figure('enqueue.single.unique', 'jobs/s', 'higher', { jobs: sizes.single, inFlight: IN_FLIGHT, unique: "a key per job, while 'unfinished'" }),
    run: async (sys) => {
      const result = await enqueueSingle({ ...sys, enqueue: sys.enqueueUnique }, { jobs: sizes.single, inFlight: IN_FLIGHT });
      return { ...result, figures: { 'enqueue.single.unique': result.figures['enqueue.single'] } };
    },
  },
  {
    // Engine only, against enqueue.single: the same calls, each with a debounce key of its own (due at once).
    key: 'enqueue_single_debounced',
    variant: true,
    declare: () => figure('enqueue.single.debounced', 'jobs/s', 'higher', { jobs: sizes.single, inFlight: IN_FLIGHT, debounce: 'a key per job, delayMs 0' }),
    run: async (sys) => {
      const result = await enqueueSingle({ ...sys, enqueue: sys.enqueueDebounced }, { jobs: sizes.single, inFlight: IN_FLIGHT });
      return { ...result, figures: { 'enqueue.single.debounced': result.figures['enqueue.single'] } };
    },
  },
  {
    key: 'enqueue_bulk',
    headline: true,
    declare: () => figure('enqueue.bulk', 'jobs/s', 'higher', { jobs: sizes.bulk, batch: BATCH, inFlight: 1 }),
    run: (sys) => enqueueBulk(sys, { jobs: sizes.bulk, batch: BATCH }),
  },
  { ...processingScenario('process_tuned', `process.c${CONCURRENCY}.tuned`, 'tuned'), headline: true },
  {
    key: 'process_tuned_2p',
    headline: true,
    settings: 'tuned',
    declare: () =>
      figure(`process.c${CONCURRENCY}.tuned.${PROCESSES}proc`, 'jobs/s', 'higher', {
        jobs: sizes.process,
        processes: PROCESSES,
        concurrencyPerProcess: CONCURRENCY,
        handler: 'no-op',
        preInserted: `bulk, batches of ${BATCH}`,
        maxSeconds: sizes.maxSeconds,
        ...perSystem((s) => s.workerParams({ concurrency: CONCURRENCY, settings: 'tuned' })),
      }, 'process_tuned_2p'),
    run: async (sys, benchUrl, module, { schema }) =>
      processingProcesses(sys, {
        processes: PROCESSES,
        jobs: sizes.process,
        batch: BATCH,
        concurrency: CONCURRENCY,
        settings: 'tuned',
        maxSeconds: sizes.maxSeconds,
        benchUrl,
        figure: `process.c${CONCURRENCY}.tuned.${PROCESSES}proc`,
        spec: module.spec,
        openOptions: await module.resolveOpen({ url: benchUrl, schema, settings: 'tuned' }),
      }),
  },
  // Engine only, against process.c10.tuned: the same run with 100 recurring schedules ticking
  // every second (the worst case: 100 tick statements and jobs a second, in another queue nobody handles).
  processingScenario('process_tuned_schedules100', `process.c${CONCURRENCY}.tuned.schedules100`, 'tuned', {
    schedules: 100,
    description: 'no-op, beside 100 recurring schedules every second (docs/recurring-jobs.md) whose jobs go to another queue',
  }),
  { ...processingScenario('process_defaults', `process.c${CONCURRENCY}.defaults`, 'defaults'), headline: true },
  ...[10, 100, 500].map((prefetch) => processingScenario(`process_pf${prefetch}`, `process.c${CONCURRENCY}.pf${prefetch}`, { prefetch })),
  // Engine-only variants at prefetch 100, each against process.c10.pf100 (the default claim:
  // fairShare 0.1, no ordering keys). Peers and builds without `variants` skip them.
  ...[
    ['process_strict', 'strict', { worker: { fairShare: 0 } }, 'no-op, fairShare 0 (strict priority: the plain claim)'],
    ['process_keyed', 'keyed', { orderingKeys: 1_000 }, 'no-op, jobs round-robin over 1,000 ordering keys'],
    ['process_insert', 'insert', { handler: 'insert' }, 'inserts one row on its own connection, then returns'],
    ['process_complete_tx', 'completeTx', { handler: 'complete-tx' }, 'inserts one row inside ctx.complete(tx => …)'],
    ['process_effect', 'effect', { handler: 'effect' }, "ctx.effect('call', async key => …): a started and a confirmed record"],
    ['process_retry', 'failOnce', { handler: 'fail-once', executionsPerJob: 2 }, 'throws RetryableJobError (retryAfterMs 0) on attempt 1, then succeeds'],
    ['process_defined', 'defined', { defined: true }, 'no-op, registered with a defineJob whose zod schema validates each payload before the handler'],
    // Flow control (docs/flow-control.md): the flow claim with a limit that never binds, fairness
    // over 100 groups, and a group limit of 1 under contention with 1, 100 and 10,000 groups.
    ['process_flow', 'flow', { worker: { limits: { globalConcurrency: 1_000_000 } } }, 'no-op, globalConcurrency 1,000,000 (the flow claim, a limit that never binds)'],
    ['process_fair100', 'fair100', { groups: 100, worker: { limits: { groupFairness: true } } }, 'no-op, jobs round-robin over 100 groups, groupFairness'],
    // Flows (docs/flows.md): the jobs as children of flows of 1,000 (each child's completion carries its result, then settles its parent).
    ['process_flow_children', 'flowChildren', { flowChildren: 1_000 }, 'no-op, the jobs as children of flows of 1,000 (plus 1 parent each): each completion fenced on its own, then its parent settled'],
    // Throughput against a rate limit: 2 groups at 100 claims per second each (the run is capped by design: the figure should read ~200).
    ['process_group2_rate100', 'group2.rate100', { groups: 2, worker: { limits: { groupRateLimit: { limit: 100, windowMs: 1_000 } } } }, 'no-op, 2 groups, groupRateLimit 100 per second each (the limit: 200 jobs/s)'],
    ...[1, 100, 10_000].map((groups) => [
      `process_group${groups}_limit1`,
      `group${groups}.limit1`,
      { groups, worker: { limits: { groupConcurrency: 1 } } },
      `no-op, jobs round-robin over ${groups} groups, groupConcurrency 1`,
    ]),
    ['process_pf100_events', 'events', EVENTS_VARIANT, EVENTS_DESCRIPTION],
  ].map(([key, suffix, variant, handler]) =>
    processingScenario(key, `process.c${CONCURRENCY}.pf100.${suffix}`, { prefetch: 100 }, { ...variant, description: handler }),
  ),
  // Engine only, against process.c10.tuned: the same with the cross-process events on.
  processingScenario('process_tuned_events', `process.c${CONCURRENCY}.tuned.events`, 'tuned', { ...EVENTS_VARIANT, description: EVENTS_DESCRIPTION }),
  {
    key: 'latency',
    headline: true,
    // The tuned settings, as graphile-worker's own latency test (perfTest/latencyTest.js) uses its
    // perf preset; for pg-boss they are the ones with LISTEN/NOTIFY.
    settings: 'tuned',
    declare: () => {
      const params = {
        samples: sizes.samples,
        gapMs: perSystem((s) => `${s.latencyGapMs[0]}-${s.latencyGapMs[1]} (uniform random)`),
        concurrency: CONCURRENCY,
        settings: 'tuned',
        ...perSystem((s) => s.workerParams({ concurrency: CONCURRENCY, settings: 'tuned' })),
      };
      for (const what of ['pickup', 'afterCommit', 'enqueueCall']) {
        for (const p of [50, 95, 99]) figure(`latency.${what}.p${p}`, 'ms', 'lower', params);
      }
    },
    run: (sys, _url, module) =>
      latency(sys, { samples: sizes.samples, gapMinMs: module.latencyGapMs[0], gapMaxMs: module.latencyGapMs[1], concurrency: CONCURRENCY, settings: 'tuned' }),
  },
];

/** A processing figure: `sizes.process` pre-inserted jobs, one worker of CONCURRENCY handlers with `settings`. */
function processingScenario(key, name, settings, variant) {
  const { description, engineOptions, ...shape } = variant ?? {};
  return {
    key,
    variant: Boolean(variant),
    settings,
    // Options of the engine itself (the system's open()), where a variant needs them.
    engineOptions,
    declare: () =>
      figure(name, 'jobs/s', 'higher', {
        jobs: sizes.process,
        concurrency: CONCURRENCY,
        settings,
        handler: description ?? 'no-op',
        ...(engineOptions ? { engineOptions } : {}),
        preInserted: `bulk, batches of ${BATCH}`,
        maxSeconds: sizes.maxSeconds,
        ...perSystem((s) => s.workerParams({ concurrency: CONCURRENCY, settings })),
      }, key),
    run: (sys, benchUrl) =>
      processing(sys, {
        jobs: sizes.process,
        batch: BATCH,
        concurrency: CONCURRENCY,
        settings,
        maxSeconds: sizes.maxSeconds,
        benchUrl,
        figure: name,
        ...(variant ? { variant: shape } : {}),
      }),
  };
}

const selected = !args.only
  ? scenarios.filter((s) => s.headline).map((s) => s.key)
  : args.only.trim() === 'all'
    ? scenarios.map((s) => s.key)
    : args.only.split(',').map((s) => s.trim());
for (const key of selected) if (!scenarios.some((s) => s.key === key)) fail(`unknown scenario in --only: ${key}`);

const context = await benchContext(serverUrl, {
  systems,
  engine: ours.enginePath,
  topologies,
  pgbouncer: topologies.some((t) => TOPOLOGIES[t].pooler) ? pgBouncerVersion() : undefined,
  runs,
  quick: args.quick,
});

const db = await createBenchDatabase(serverUrl);
let interrupted = false;
dropOnSignals(db, () => (interrupted = true));

progress(`bench: database ${db.name} on ${context.server} (${context.postgres.kind}, PostgreSQL ${context.postgres.serverVersion}); ${runs} run(s); ${systems.map((s) => s.label).join(' vs ')}`);
const started = Date.now();
let failed = false;
try {
  for (const scenario of scenarios.filter((s) => selected.includes(s.key))) {
    scenario.declare();
    for (let r = 1; r <= runs; r++) {
      // Interleaved (ours, peer 1, peer 2, ours, …) so that drifting noise hits all alike.
      for (const sys of systems) {
        if (interrupted) break;
        if (scenario.variant && !sys.variants) continue;
        const schema = `b_${scenario.key}_${r}_${sys.key.replace(/[^a-z0-9]/g, '_')}`;
        const handle = await sys.open({ url: db.url, schema, diag: args.diag, settings: scenario.settings ?? 'defaults', engineOptions: scenario.engineOptions });
        let result;
        try {
          result = await scenario.run(handle, db.url, sys, { schema });
        } finally {
          await handle.close();
          await resetBetweenRuns(db.url, schema);
        }
        for (const [name, value] of Object.entries(result.figures)) {
          const f = figures.get(name);
          (f.values[sys.key] ??= []).push(value);
          if (result.capped) f.capped[sys.key] = (f.capped[sys.key] ?? 0) + 1;
        }
        const shown = Object.entries(result.figures)
          .map(([name, value]) => `${name}=${format(value, figures.get(name).unit)}`)
          .join(' ');
        progress(`  ${scenario.key} run ${r}/${runs} ${sys.key}: ${shown}${result.capped ? ' (CAPPED/INCOMPLETE)' : ''}`);
        if (args.diag || result.capped || (result.check && result.check.executions > result.check.expectedExecutions)) progress(`    detail: ${JSON.stringify(result.detail)}`);
        if (result.check) {
          const c = result.check;
          const problems = [];
          const notDone = Object.entries(c.byState).filter(([state]) => !['succeeded', 'completed'].includes(state));
          const failedStates = notDone.filter(([state]) => ['dead', 'failed', 'cancelled'].includes(state));
          if (c.executions > c.expectedExecutions) problems.push(`${c.executions - c.expectedExecutions} extra handler executions (jobs ran more than expected)`);
          if (c.sideRows !== undefined && c.sideRows !== c.succeeded) problems.push(`${c.sideRows} side rows for ${c.succeeded} succeeded jobs`);
          if (failedStates.length) problems.push(`jobs ended ${JSON.stringify(Object.fromEntries(failedStates))}`);
          const capped = c.succeeded !== c.jobs;
          const status = problems.length ? 'FAILED' : capped ? 'capped' : 'ok';
          if (capped) problems.push(`${c.succeeded}/${c.jobs} succeeded by the ${sizes.maxSeconds} s cap (${JSON.stringify(Object.fromEntries(notDone))} left)`);
          checks.push({ scenario: scenario.key, run: r, system: sys.key, status, problems });
          // Ours must drain every job exactly once; a polling peer that is merely slow is reported as capped.
          if (mustPass.has(sys) && problems.length) failed = true;
        }
      }
    }
  }
} finally {
  await Promise.allSettled([...bouncers.values()].map((b) => b.stop()));
  await db.drop().catch((error) => progress(`could not drop ${db.name}: ${error.message}`));
}
finishContext(context, started);

// One topology: ours (in it) beside optional peers. Several: each topology beside the first.
const base = systems[0];
const peers = topologies.length === 1 ? systems.slice(1) : [];
const variants = topologies.length > 1 ? systems.slice(1) : [];
if (args.json) {
  progress(`context: ${JSON.stringify(context)}`);
  for (const f of figures.values()) {
    const mine = summarize(f.values[base.key] ?? []);
    for (const sys of systems) {
      const s = summarize(f.values[sys.key] ?? []);
      const out = {
        name: f.name,
        system: sys.key,
        unit: f.unit,
        better: f.better,
        median: s.median,
        min: s.min,
        max: s.max,
        runs: s.n,
        values: f.values[sys.key] ?? [],
        params: f.params,
      };
      if (f.capped[sys.key]) out.cappedRuns = f.capped[sys.key];
      const figureChecks = checks.filter((c) => c.system === sys.key && c.scenario === f.scenario);
      if (figureChecks.length) out.checks = figureChecks.map(({ run, status, problems }) => ({ run, status, problems }));
      if (sys === base && peers.length) {
        const ratios = Object.fromEntries(peers.map((p) => [p.key, mine.median / summarize(f.values[p.key] ?? []).median]));
        out.ratioToPeers = ratios;
        if (peers.length === 1) out.ratioToPeer = ratios[peers[0].key];
      }
      if (variants.includes(sys)) out.ratioTo = { system: base.key, ratio: s.median / mine.median };
      process.stdout.write(`${JSON.stringify(out)}\n`);
    }
  }
} else {
  printTable();
}
if (failed) progress('bench: a check failed for ours (see Checks): exit code 1.');
process.exit(failed ? 1 : 0);

function printTable() {
  const lines = [
    ...contextLines(context, context.pgbouncer ? ` ${context.pgbouncer} (started by this run, in front of that server).` : ''),
    `Systems: ${context.systems.join(' vs ')}. Median of ${runs} run(s) [min–max]; ${context.wallSeconds} s in all.${args.quick ? ' QUICK sizes: a smoke test.' : ''}`,
    '',
  ];
  const header = ['figure', 'unit', base.label];
  for (const p of peers) header.push(p.label, peers.length === 1 ? 'ours/peer' : `ours/${p.key}`);
  if (peers.length) header.push('better');
  for (const sys of variants) header.push(sys.label, `÷ ${base.label}`);
  const rows = [header];
  for (const f of figures.values()) {
    const cell = (sys) => {
      const s = summarize(f.values[sys.key] ?? []);
      const capped = f.capped[sys.key] ? ` *${f.capped[sys.key]}` : '';
      return `${format(s.median, f.unit)} [${format(s.min, f.unit)}–${format(s.max, f.unit)}]${capped}`;
    };
    const ratioOf = (a, b) => {
      const ratio = summarize(f.values[a.key] ?? []).median / summarize(f.values[b.key] ?? []).median;
      return Number.isFinite(ratio) ? `${ratio >= 10 ? ratio.toFixed(0) : ratio.toFixed(2)}×` : 'n/a';
    };
    const row = [f.name, f.unit, cell(base)];
    for (const p of peers) row.push(cell(p), ratioOf(base, p));
    if (peers.length) row.push(f.better);
    for (const sys of variants) row.push(cell(sys), ratioOf(sys, base));
    rows.push(row);
  }
  const widths = header.map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  const fmt = (r) => r.map((c, i) => (i < 2 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  lines.push(fmt(rows[0]), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(fmt));
  if ([...figures.values()].some((f) => Object.keys(f.capped).length)) {
    lines.push('', `*N: N runs hit the ${sizes.maxSeconds} s cap before every job succeeded; the figure is then jobs succeeded by the cap / elapsed time.`);
  }
  lines.push('', 'Parameters:');
  const seen = new Set();
  for (const f of figures.values()) {
    const key = JSON.stringify(f.params);
    if (seen.has(key)) continue;
    seen.add(key);
    const names = [...figures.values()].filter((g) => JSON.stringify(g.params) === key).map((g) => g.name);
    const shownName = names.length > 1 ? `${names[0].split('.').slice(0, 1)}.*` : names[0];
    lines.push(`  ${shownName}: ${JSON.stringify(f.params)}`);
  }
  if (checks.length) lines.push('', 'Checks (processing runs: every job succeeded, each handler ran once; ours must pass, a peer that does not drain within the cap is "capped"):');
  const byScenario = new Map();
  for (const c of checks) {
    const k = `${c.scenario} ${c.system}`;
    if (!byScenario.has(k)) byScenario.set(k, []);
    byScenario.get(k).push(c);
  }
  for (const [k, list] of byScenario) {
    const bad = list.filter((c) => c.status !== 'ok');
    const tally = ['ok', 'capped', 'FAILED'].map((st) => [st, list.filter((c) => c.status === st).length]).filter(([, n]) => n).map(([st, n]) => `${st} ${n}/${list.length}`).join(', ');
    lines.push(`  ${k}: ${tally}${bad.length ? ` — ${bad.map((c) => `run ${c.run}: ${c.problems.join('; ')}`).join(' | ')}` : ''}`);
  }
  if (peers.length) lines.push('', 'ours/peer: the ratio of the medians. For jobs/s above 1 means ours is faster; for ms below 1 means ours is faster.');
  if (variants.length) lines.push('', `÷ ${base.label}: each topology's median over ${base.label}'s. For jobs/s below 1 is a cost; for ms above 1 is.`);
  process.stdout.write(`${lines.join('\n')}\n`);
}

function perSystem(fn) {
  return Object.fromEntries(systems.map((s) => [s.key, fn(s)]));
}

function format(value, unit) {
  if (!Number.isFinite(value)) return 'n/a';
  if (unit === 'ms') return value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2);
  return value >= 100 ? String(Math.round(value)) : value.toFixed(1);
}

function progress(message) {
  process.stderr.write(`${message}\n`);
}

function fail(message) {
  process.stderr.write(`bench: ${message}\n`);
  process.exit(2);
}
