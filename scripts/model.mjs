#!/usr/bin/env node
// `npm run test:model -- --runs N [--seed S | --seed random] [--mutants [--only NAME]]`: the
// randomized model-based runs of the engine (test/model/) on a real PostgreSQL (DATABASE_URL, or a
// throwaway embedded one). Default: 150 runs of seed 7, under a minute here.
//
// --mutants: the generator must find defects on its own. Each mutant below is a defect of issue 11
// put back into the store's SQL, in a copy of the tree (the checkout is never touched); the
// generated runs alone (not the fixed regression lists) must fail on it within --runs runs, and
// the shrunk list fast-check reports is printed; then the list kept from that catch as a fixed
// regression test (test/model/engine.model.spec.ts) must fail on it too. A mutant that survives
// either is an exit code 1: the runs have gone blind to a defect they once found. The unmutated runs come first: a failure there
// means the engine or the harness is wrong, and the mutants would prove nothing.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const ROOT = new URL('..', import.meta.url).pathname;

/** Each mutant: replacements in one file; every `from` must occur exactly once. */
const MUTANTS = [
  {
    name: 'D9',
    regression: 'regression D9:',
    what: "cancel lets go of a running job's lease and ordering key at once",
    file: 'lib/engine/store/operator.ts',
    edits: [
      ["lease_owner = CASE WHEN t.status = 'running' THEN j.lease_owner END,", 'lease_owner = NULL,'],
      ["lease_expires_at = CASE WHEN t.status = 'running' THEN j.lease_expires_at END,", 'lease_expires_at = NULL,'],
      ["CASE WHEN t.status = 'running' THEN NULL ELSE j.ordering_key END AS ordering_key", 'j.ordering_key AS ordering_key'],
    ],
  },
  {
    name: 'D16',
    regression: 'regression D16:',
    what: 'complete-many tells outcomes by id, not by (id, token)',
    file: 'lib/engine/store/finish.ts',
    // Applied rows told from the input by id (each input whose id was updated), refused ones by id too.
    edits: [
      ['WHERE (i.id, i.token) NOT IN (SELECT id, token FROM done)', 'WHERE i.id NOT IN (SELECT id FROM done)'],
      ['SELECT d.id::text AS id, d.token::text AS token, true AS applied', 'SELECT i.id::text AS id, i.token::text AS token, true AS applied'],
      ['FROM done d\n       UNION ALL', 'FROM input i WHERE i.id IN (SELECT id FROM done)\n       UNION ALL'],
    ],
  },
  {
    name: 'no-token',
    regression: 'regression no-token:',
    what: 'complete-many without the token check',
    file: 'lib/engine/store/finish.ts',
    // Both of complete-many's writes (the move to jobs_succeeded, and the update of the jobs that stay).
    edits: [['coalesce((j.id, j.lease_token) IN (SELECT id, token FROM input), false)', 'true', 'every']],
  },
  {
    name: 'no-expired-cancels',
    regression: 'regression: the reaper ends a cancelled attempt',
    what: 'the reaper never ends cancelled attempts whose lease ran out (their key stays taken)',
    file: 'lib/engine/store/maintenance.ts',
    edits: [["WHERE status = 'cancelled' AND lease_expires_at <= now()", "WHERE status = 'cancelled' AND lease_expires_at <= now() AND false"]],
  },
];

const { values } = parseArgs({
  options: { runs: { type: 'string', default: '150' }, seed: { type: 'string', default: '7' }, mutants: { type: 'boolean', default: false }, only: { type: 'string' } },
});
if (values.seed === 'random') values.seed = String(Date.now() % 2 ** 31);
for (const name of ['runs', 'seed']) {
  if (!/^\d+$/.test(values[name])) {
    process.stderr.write(`test:model: --${name} must be a whole number, got "${values[name]}".\n`);
    process.exit(2);
  }
}
const mutants = MUTANTS.filter((m) => !values.only || m.name === values.only);
if (values.only && mutants.length === 0) {
  process.stderr.write(`test:model: no mutant named "${values.only}"; there are ${MUTANTS.map((m) => m.name).join(', ')}.\n`);
  process.exit(2);
}

/** Runs the model spec in `cwd`: all of it, or only the tests whose name matches `only`. */
function vitest(cwd, only, capture) {
  const argv = ['scripts/with-postgres.mjs', 'vitest', 'run', '--config', 'vitest.model.config.ts', ...(only ? ['-t', only] : [])];
  return spawnSync(process.execPath, argv, {
    cwd,
    stdio: capture ? ['ignore', 'pipe', 'pipe'] : 'inherit',
    encoding: 'utf8',
    env: { ...process.env, PATH: `${join(cwd, 'node_modules', '.bin')}:${process.env.PATH}`, MODEL_RUNS: values.runs, MODEL_SEED: values.seed },
  });
}

process.stdout.write(`test:model: ${values.runs} runs, seed ${values.seed} (replay with --seed ${values.seed})\n`);
const plain = vitest(ROOT, undefined, false);
if (plain.status !== 0 || !values.mutants) process.exit(plain.status ?? 1);

// A copy of the tracked and new files (not node_modules, not .git), one per mutant.
const files = spawnSync('git', ['ls-files', '-co', '--exclude-standard'], { cwd: ROOT, encoding: 'utf8' }).stdout.split('\n').filter(Boolean);
let survived = 0;
for (const mutant of mutants) {
  const dir = mkdtempSync(join(tmpdir(), `pgq-mutant-${mutant.name}-`));
  try {
    for (const file of files) {
      try {
        cpSync(join(ROOT, file), join(dir, file), { recursive: true });
      } catch (e) {
        if (e.code !== 'ENOENT') throw e; // a tracked file deleted in the work tree
      }
    }
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
    const target = join(dir, mutant.file);
    let text = readFileSync(target, 'utf8');
    for (const [from, to, every] of mutant.edits) {
      const count = text.split(from).length - 1;
      if (every ? count === 0 : count !== 1) {
        throw new Error(`test:model: mutant ${mutant.name}: "${from}" occurs ${count} times in ${mutant.file}, not ${every ? 'at least' : ''} once; update the mutant to the code.`);
      }
      text = every ? text.replaceAll(from, to) : text.replace(from, to);
    }
    writeFileSync(target, text);
    const started = Date.now();
    const run = vitest(dir, 'generated runs', true);
    const seconds = ((Date.now() - started) / 1000).toFixed(0);
    const out = `${run.stdout}\n${run.stderr}`;
    if (run.status === 0) {
      survived += 1;
      process.stdout.write(`mutant ${mutant.name} SURVIVED ${values.runs} runs (${seconds} s): ${mutant.what}\n`);
      continue;
    }
    // fast-check's report: after how many runs, the shrunk list, and the step and check that failed.
    const report = out.split('\n').filter((l) => /Property failed after|Shrunk \d+ time|Counterexample|AssertionError|^\s*at \{/.test(l));
    process.stdout.write(`mutant ${mutant.name} caught (${seconds} s): ${mutant.what}\n${report.map((l) => `  ${l.trim()}`).join('\n')}\n`);
    // The list kept from an earlier catch must still fail on it: a regression test that cannot fail is none.
    const kept = vitest(dir, mutant.regression, true);
    if (kept.status === 0) {
      survived += 1;
      process.stdout.write(`mutant ${mutant.name}: its regression test "${mutant.regression}" PASSES with the mutant in place\n`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
process.exit(survived === 0 ? 0 : 1);

