#!/usr/bin/env node
// npm run bench:sustained [-- --minutes 4] [--systems ours,graphile-worker,pg-boss] [--runs N] [--quick] [--json]
//
// Sustained pressure: one long run per system in which a producer keeps a steady backlog and one
// worker (the `tuned` settings) processes it, while from minute 1 until a minute before the end
// another session holds a snapshot open (xmin pinned: vacuum can remove nothing that died since).
// Reports jobs/s per interval, the pinned window's rate over the first minute's (the goal: ≥ 0.8×),
// the rate after the snapshot is released, and the job tables' dead tuples. In a database of its
// own (bench_<random>) on the server in DATABASE_URL, dropped at the end. See bench/README.md.
import { parseArgs } from 'node:util';
import { fail, formatRate, formatRatio, progress, systemsFrom, table } from './lib/cli.mjs';
import { benchContext, contextLines, finishContext } from './lib/context.mjs';
import { createBenchDatabase, dropOnSignals, resetBetweenRuns } from './lib/db.mjs';
import { summarize } from './lib/stats.mjs';
import ours from './ours.mjs';
import { sustained } from './scenarios.mjs';

const { values: args } = parseArgs({
  options: {
    minutes: { type: 'string', default: '4' },
    'interval-seconds': { type: 'string' },
    'pin-from-seconds': { type: 'string' },
    'pin-to-seconds': { type: 'string' },
    backlog: { type: 'string', default: '10000' },
    systems: { type: 'string', default: 'ours,graphile-worker,pg-boss' },
    runs: { type: 'string', default: '1' },
    quick: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

if (args.help) {
  process.stdout.write(`Usage: npm run bench:sustained -- [options]
  --minutes M             one run's length per system (default 4)
  --interval-seconds S    the throughput interval (default 30)
  --pin-from-seconds S    when the snapshot is taken (default 60: after the first minute)
  --pin-to-seconds S      when it is released (default: a minute before the end)
  --backlog N             ready jobs the producer keeps queued (default 10000)
  --systems LIST          comma-separated: ours, graphile-worker, pg-boss (default: all three)
  --runs N                runs per system, interleaved; the median is reported [min–max] (default 1)
  --quick                 10 s per system (2 s intervals, snapshot from 4 s to 8 s): a smoke test
  --json                  one JSON object per system on stdout instead of the tables
`);
  process.exit(0);
}

const serverUrl = process.env.DATABASE_URL;
if (!serverUrl) fail('DATABASE_URL is not set (npm run bench:sustained starts a throwaway PostgreSQL when it is unset)');
const seconds = args.quick ? 10 : Number(args.minutes) * 60;
const intervalSeconds = Number(args['interval-seconds'] ?? (args.quick ? 2 : 30));
const pinFromSeconds = Number(args['pin-from-seconds'] ?? (args.quick ? 4 : 60));
const pinToSeconds = Number(args['pin-to-seconds'] ?? (args.quick ? 8 : seconds - 60));
const backlog = Number(args.backlog);
const runs = Number(args.runs);
if (!(seconds > 0 && intervalSeconds > 0)) fail('--minutes and --interval-seconds must be positive');
if (!(pinFromSeconds >= intervalSeconds && pinToSeconds > pinFromSeconds && pinToSeconds < seconds)) {
  fail(`the snapshot must be taken after the first interval and released before the end (from ${pinFromSeconds} s to ${pinToSeconds} s of ${seconds} s)`);
}
if (!Number.isInteger(runs) || runs < 1) fail('--runs must be a positive integer');
const systems = await systemsFrom(args.systems).catch((error) => fail(error.message));
const CONCURRENCY = 10;
const SETTINGS = 'tuned';
/** Jobs per producer call (enqueueMany). */
const BATCH = 1_000;
/** The goals of issue 15: the pinned window keeps ≥ 0.8× the first minute; "recovered": the rate after release ≥ 0.9× the first minute. */
const PINNED_GOAL = 0.8;
const RECOVERED = 0.9;

const context = await benchContext(serverUrl, {
  systems,
  engine: ours.enginePath,
  seconds,
  intervalSeconds,
  pinFromSeconds,
  pinToSeconds,
  backlog,
  concurrency: CONCURRENCY,
  settings: SETTINGS,
  runs,
  quick: args.quick,
});
const db = await createBenchDatabase(serverUrl);
let interrupted = false;
dropOnSignals(db, () => (interrupted = true));
progress(`bench:sustained: database ${db.name} on ${context.server} (${context.postgres.kind}, PostgreSQL ${context.postgres.serverVersion}); ${seconds} s per system and run, snapshot held ${pinFromSeconds}–${pinToSeconds} s; ${systems.map((s) => s.label).join(', ')}`);
const started = Date.now();
/** system key → results of its runs */
const results = new Map(systems.map((s) => [s.key, []]));
try {
  for (let r = 1; r <= runs; r++) {
    for (const sys of systems) {
      if (interrupted) break;
      const schema = `s_sustained_${r}_${sys.key.replace(/[^a-z0-9]/g, '_')}`;
      const handle = await sys.open({ url: db.url, schema, settings: SETTINGS });
      let result;
      try {
        result = await sustained(handle, { seconds, intervalSeconds, pinFromSeconds, pinToSeconds, backlog, batch: BATCH, concurrency: CONCURRENCY, settings: SETTINGS, benchUrl: db.url, schema });
      } finally {
        await handle.close();
        await resetBetweenRuns(db.url, schema);
      }
      results.get(sys.key).push(result);
      progress(`  run ${r}/${runs} ${sys.key}: ${result.intervals.map((i) => formatRate(i.jobsPerSecond)).join(' ')} jobs/s; pinned/first ${formatRatio(result.pinned / result.first)}, after/first ${formatRatio(result.after / result.first)}`);
    }
  }
} finally {
  await db.drop().catch((error) => progress(`could not drop ${db.name}: ${error.message}`));
}
finishContext(context, started);

const dead = (event) => event.tables.reduce((a, t) => a + t.dead, 0);
const bytes = (event) => event.tables.reduce((a, t) => a + t.bytes, 0);
const eventOf = (result, kind) => result.events.find((e) => e.kind === kind);
/** One figure per system: its value in each run. */
const figures = [
  [`before, 0–${pinFromSeconds} s, jobs/s`, (x) => x.first, formatRate],
  [`snapshot held, ${pinFromSeconds}–${pinToSeconds} s, jobs/s`, (x) => x.pinned, formatRate],
  [`after release, ${pinToSeconds}–${seconds} s, jobs/s`, (x) => x.after, formatRate],
  [`held / before (goal ≥ ${PINNED_GOAL}×)`, (x) => x.pinned / x.first, formatRatio],
  [`after / before (recovered: ≥ ${RECOVERED}×)`, (x) => x.after / x.first, formatRatio],
  ['dead tuples, snapshot taken', (x) => dead(eventOf(x, 'snapshot taken')), formatCount],
  ['dead tuples, before release', (x) => dead(eventOf(x, 'snapshot released')), formatCount],
  ['dead tuples, end', (x) => dead(eventOf(x, 'end')), formatCount],
  ['job tables MB, before release', (x) => bytes(eventOf(x, 'snapshot released')) / 2 ** 20, formatRate],
  ['job tables MB, end', (x) => bytes(eventOf(x, 'end')) / 2 ** 20, formatRate],
];

if (args.json) {
  progress(`context: ${JSON.stringify(context)}`);
  for (const sys of systems) {
    const list = results.get(sys.key);
    const out = { system: sys.key, label: sys.label, runs: list.length, settings: SETTINGS, workerParams: sys.workerParams({ concurrency: CONCURRENCY, settings: SETTINGS }) };
    out.summary = Object.fromEntries(figures.map(([name, of]) => [name, summarize(list.map(of))]));
    out.results = list;
    process.stdout.write(`${JSON.stringify(out)}\n`);
  }
} else {
  const lines = [
    ...contextLines(context),
    `Systems: ${context.systems.join(', ')}. Each: ${seconds} s, one worker of ${CONCURRENCY} handlers, the ${SETTINGS} settings, a producer keeping ${backlog} jobs queued; another session holds a REPEATABLE READ snapshot from ${pinFromSeconds} s to ${pinToSeconds} s. ${runs > 1 ? `Median of ${runs} runs [min–max]; ` : ''}${context.wallSeconds} s in all.${args.quick ? ' QUICK: a smoke test, not a measurement.' : ''}`,
    '',
  ];
  const cell = (values, fmt) => {
    const s = summarize(values);
    return runs > 1 ? `${fmt(s.median)} [${fmt(s.min)}–${fmt(s.max)}]` : fmt(s.median);
  };
  for (const sys of systems) {
    const list = results.get(sys.key);
    if (!list.length) continue;
    lines.push(`${sys.label}: handler executions per ${intervalSeconds} s interval`);
    const rows = [['interval', 'jobs/s', 'enqueued/s', 'queued at end', 'index reads/job', 'snapshot']];
    list[0].intervals.forEach((interval, i) => {
      const held = interval.from >= pinFromSeconds && interval.to <= pinToSeconds;
      rows.push([
        `${interval.from}–${interval.to} s`,
        cell(list.map((x) => x.intervals[i]?.jobsPerSecond), formatRate),
        cell(list.map((x) => x.intervals[i]?.enqueuedPerSecond), formatRate),
        cell(list.map((x) => x.intervals[i]?.backlog), formatCount),
        cell(list.map((x) => x.intervals[i]?.indexReadsPerJob), formatRate),
        held ? 'held' : '',
      ]);
    });
    lines.push(...table(rows), '');
  }
  const rows = [['figure', ...systems.map((s) => s.label)]];
  for (const [name, of, fmt] of figures) rows.push([name, ...systems.map((s) => cell(results.get(s.key).map(of), fmt))]);
  lines.push(...table(rows), '');
  lines.push(`Job tables: ${systems.map((s) => `${s.label}: ${eventOf(results.get(s.key)[0] ?? { events: [] }, 'end')?.tables.map((t) => t.table).join(', ') ?? 'n/a'}`).join('; ')} (pg_stat_user_tables, as of the last statistics flush; sizes with indexes and TOAST).`);
  lines.push('Rates are handler executions per second (a no-op handler), averaged over the whole intervals before the snapshot ("first": the first minute by default), inside it ("held") and after it ("after").');
  process.stdout.write(`${lines.join('\n')}\n`);
}
process.exit(0);

function formatCount(value) {
  return Number.isFinite(value) ? Math.round(value).toLocaleString('en-US') : 'n/a';
}
