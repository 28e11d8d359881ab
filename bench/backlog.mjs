#!/usr/bin/env node
// npm run bench:backlog [-- --rows N] [--systems ours,graphile-worker,pg-boss] [--runs N] [--quick] [--json]
//
// Backlogs: each system's processing rate of 10,000 ready jobs (one worker, the `tuned`
// settings, like process.c10.tuned) alone, beside --rows (1,000,000) ready jobs of another queue,
// and beside --rows delayed jobs (due in an hour) of the same queue; each rate's ratio to the
// plain one (the goal: ≥ 0.9×). In a database of its own (bench_<random>) on the server in
// DATABASE_URL, dropped at the end. See bench/README.md.
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { fail, formatRate, formatRatio, progress, systemsFrom, table } from './lib/cli.mjs';
import { benchContext, contextLines, finishContext } from './lib/context.mjs';
import { analyze, createBenchDatabase, dropOnSignals, resetBetweenRuns } from './lib/db.mjs';
import { summarize } from './lib/stats.mjs';
import ours from './ours.mjs';
import { processing, tableStats } from './scenarios.mjs';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string' },
    jobs: { type: 'string', default: '10000' },
    systems: { type: 'string', default: 'ours,graphile-worker,pg-boss' },
    runs: { type: 'string' },
    'max-seconds': { type: 'string', default: '60' },
    quick: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

if (args.help) {
  process.stdout.write(`Usage: npm run bench:backlog -- [options]
  --rows N          jobs beside the measured ones (default 1000000; 50000 with --quick)
  --jobs N          the measured ready jobs (default 10000)
  --systems LIST    comma-separated: ours, graphile-worker, pg-boss (default: all three)
  --runs N          measured rounds per system and backlog, on the same filled table; the median
                    is reported [min–max] (default 3; 1 with --quick), after one warm-up round
  --max-seconds S   cap of one round (default 60)
  --quick           --rows 50000, one round: a smoke test
  --json            one JSON object per system and backlog on stdout instead of the table
`);
  process.exit(0);
}

const serverUrl = process.env.DATABASE_URL;
if (!serverUrl) fail('DATABASE_URL is not set (npm run bench:backlog starts a throwaway PostgreSQL when it is unset)');
const rows = Number(args.rows ?? (args.quick ? 50_000 : 1_000_000));
const jobs = Number(args.jobs);
const runs = Number(args.runs ?? (args.quick ? 1 : 3));
const maxSeconds = Number(args['max-seconds']);
for (const [name, value] of [['--rows', rows], ['--jobs', jobs], ['--runs', runs]]) if (!Number.isInteger(value) || value < 1) fail(`${name} must be a positive integer`);
const systems = await systemsFrom(args.systems).catch((error) => fail(error.message));
const CONCURRENCY = 10;
const SETTINGS = 'tuned';
/** Jobs per enqueueMany call of the measured jobs (as the bench's processing figures). */
const BATCH = 1_000;
const GOAL = 0.9;
/** The backlogs, in the order they run; `fill`: what fillBacklog() adds first (each adapter documents how). */
const BACKLOGS = [
  { key: 'plain', label: `${jobs.toLocaleString('en-US')} ready alone` },
  { key: 'other-queue', fill: 'other-queue', label: `+ ${rows.toLocaleString('en-US')} ready, another queue` },
  { key: 'delayed', fill: 'delayed', label: `+ ${rows.toLocaleString('en-US')} delayed (due in 1 h), same queue` },
];

const context = await benchContext(serverUrl, { systems, engine: ours.enginePath, rows, jobs, runs, concurrency: CONCURRENCY, settings: SETTINGS, maxSeconds, quick: args.quick });
const db = await createBenchDatabase(serverUrl);
let interrupted = false;
dropOnSignals(db, () => (interrupted = true));
progress(`bench:backlog: database ${db.name} on ${context.server} (${context.postgres.kind}, PostgreSQL ${context.postgres.serverVersion}); ${jobs} jobs beside ${rows} others, ${runs} round(s); ${systems.map((s) => s.label).join(', ')}`);
const started = Date.now();
/** `${system} ${backlog}` → { rates: number[], checks: [], fill: { seconds, tables } } */
const results = new Map();
let failed = false;
try {
  for (const sys of systems) {
    if (interrupted) break;
    const schemaOf = (backlog) => `s_backlog_${backlog.key.replace(/-/g, '_')}_${sys.key.replace(/[^a-z0-9]/g, '_')}`;
    try {
      // Each backlog's schema, filled through a first handle…
      for (const backlog of BACKLOGS) {
        const schema = schemaOf(backlog);
        const result = { rates: [], checks: [], details: [] };
        results.set(`${sys.key} ${backlog.key}`, result);
        const setup = await sys.open({ url: db.url, schema, settings: SETTINGS });
        try {
          if (backlog.fill) {
            const t0 = performance.now();
            await setup.fillBacklog({ rows, kind: backlog.fill });
            await analyze(db.url);
            result.fill = { seconds: Math.round((performance.now() - t0) / 100) / 10, tables: await tableStats(db.url, schema, setup.jobTables) };
            progress(`  ${sys.key} ${backlog.key}: ${rows} rows filled in ${result.fill.seconds} s`);
          }
        } finally {
          await setup.close();
        }
      }
      // …then the rounds, the backlogs interleaved (alone, other queue, delayed, alone, …) so that
      // drifting load hits them alike; round 0 warms up (JIT, caches) and is not counted.
      for (let r = 0; r <= runs; r++) {
        for (const backlog of BACKLOGS) {
          if (interrupted) break;
          const result = results.get(`${sys.key} ${backlog.key}`);
          const handle = await sys.open({ url: db.url, schema: schemaOf(backlog), settings: SETTINGS });
          try {
            // Only the jobs of this round count (the backlog, and earlier rounds, are older).
            const measured = { ...handle, counts: await handle.since() };
            const out = await processing(measured, { jobs, batch: BATCH, concurrency: CONCURRENCY, settings: SETTINGS, maxSeconds, benchUrl: db.url, figure: 'rate' });
            const c = out.check;
            const problems = [];
            if (c.executions > c.expectedExecutions) problems.push(`${c.executions - c.expectedExecutions} extra handler executions`);
            if (c.succeeded !== c.jobs) problems.push(`${c.succeeded}/${c.jobs} succeeded by the ${maxSeconds} s cap`);
            progress(`  ${sys.key} ${backlog.key} round ${r}/${runs}${r === 0 ? ' (warm-up)' : ''}: ${formatRate(out.figures.rate)} jobs/s${problems.length ? ` (${problems.join('; ')})` : ''}`);
            if (r === 0) continue;
            result.rates.push(out.figures.rate);
            result.details.push(out.detail);
            result.checks.push({ run: r, status: problems.length ? (out.capped && !(c.executions > c.expectedExecutions) ? 'capped' : 'FAILED') : 'ok', problems });
            if (sys === ours && problems.length) failed = true;
          } finally {
            await handle.close();
          }
        }
      }
    } finally {
      for (const backlog of BACKLOGS) await resetBetweenRuns(db.url, schemaOf(backlog));
    }
  }
} finally {
  await db.drop().catch((error) => progress(`could not drop ${db.name}: ${error.message}`));
}
finishContext(context, started);

const plainOf = (sys) => summarize(results.get(`${sys.key} plain`)?.rates ?? []).median;
if (args.json) {
  progress(`context: ${JSON.stringify(context)}`);
  for (const backlog of BACKLOGS) {
    for (const sys of systems) {
      const result = results.get(`${sys.key} ${backlog.key}`);
      if (!result) continue;
      const s = summarize(result.rates);
      process.stdout.write(`${JSON.stringify({
        backlog: backlog.key,
        system: sys.key,
        unit: 'jobs/s',
        median: s.median,
        min: s.min,
        max: s.max,
        runs: s.n,
        values: result.rates,
        ratioToPlain: s.median / plainOf(sys),
        params: { jobs, beside: backlog.fill ? rows : 0, concurrency: CONCURRENCY, settings: SETTINGS, ...sys.workerParams({ concurrency: CONCURRENCY, settings: SETTINGS }) },
        fill: result.fill,
        checks: result.checks,
        details: result.details,
      })}\n`);
    }
  }
} else {
  const cell = (values) => {
    const s = summarize(values);
    return runs > 1 ? `${formatRate(s.median)} [${formatRate(s.min)}–${formatRate(s.max)}]` : formatRate(s.median);
  };
  const header = ['backlog'];
  for (const sys of systems) header.push(`${sys.label}, jobs/s`, `÷ alone`);
  const rowsOut = [header];
  for (const backlog of BACKLOGS) {
    const row = [backlog.label];
    for (const sys of systems) {
      const result = results.get(`${sys.key} ${backlog.key}`);
      row.push(result ? cell(result.rates) : 'n/a', backlog.fill && result ? formatRatio(summarize(result.rates).median / plainOf(sys)) : '');
    }
    rowsOut.push(row);
  }
  const fills = [];
  for (const backlog of BACKLOGS.filter((b) => b.fill)) {
    for (const sys of systems) {
      const fill = results.get(`${sys.key} ${backlog.key}`)?.fill;
      if (fill) fills.push(`  ${backlog.key}, ${sys.label}: ${fill.seconds} s; ${fill.tables.map((t) => `${t.table} ${Math.round(t.bytes / 2 ** 20)} MB`).join(', ')}`);
    }
  }
  const checkLines = [];
  for (const [k, result] of results) {
    const bad = result.checks.filter((c) => c.status !== 'ok');
    checkLines.push(`  ${k}: ${bad.length ? bad.map((c) => `round ${c.run} ${c.status}: ${c.problems.join('; ')}`).join(' | ') : `ok ${result.checks.length}/${result.checks.length}`}`);
  }
  process.stdout.write(`${[
    ...contextLines(context),
    `Systems: ${context.systems.join(', ')}. ${jobs.toLocaleString('en-US')} ready jobs preloaded, then one worker of ${CONCURRENCY} handlers with the ${SETTINGS} settings, a no-op handler; ${runs > 1 ? `median of ${runs} rounds [min–max] on one filled table each, the backlogs interleaved, after a warm-up round` : '1 round after a warm-up round'}; ${context.wallSeconds} s in all.${args.quick ? ' QUICK: a smoke test, not a measurement.' : ''}`,
    '',
    ...table(rowsOut),
    '',
    `÷ alone: the median over the same system's "alone" median (the goal: ≥ ${GOAL}×).`,
    'Fill (the backlog beside the measured jobs, through each system\'s bulk path with its indexes in place; then ANALYZE), and the job tables after it:',
    ...fills,
    'Checks (every measured job succeeded, each handler ran once):',
    ...checkLines,
  ].join('\n')}\n`);
}
if (failed) progress('bench:backlog: a check failed for ours (see Checks): exit code 1.');
process.exit(failed ? 1 : 0);
