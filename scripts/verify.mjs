#!/usr/bin/env node
// Model-checks spec/queue.pml with spin (docs/how-we-know.md): the protocol must hold every
// property in each configuration, and every mutant (a defect of issue 11 put back) must fail with
// a counterexample trail, printed here step by step. Exit code 1 on any surprise.
//
//   node scripts/verify.mjs            the everyday bounds (about a minute on 2 cores)
//   node scripts/verify.mjs --deep     bigger bounds too (3 jobs, 3 workers, more operator actions: several minutes, ~2 GB)
//   node scripts/verify.mjs --only keys   the checks whose name contains "keys"
//
// Needs spin and gcc (Debian packages spin, gcc).
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';

const MODEL = new URL('../spec/queue.pml', import.meta.url).pathname;
const args = process.argv.slice(2);
const deep = args.includes('--deep');
const only = args.includes('--only') ? args[args.indexOf('--only') + 1] : undefined;

// The configurations: -D flags for spin's preprocessor (the model's bounds), how pan searches.
// "lease": 1 job, 2 worker slots (the fence, the buffer, ctx.complete, the completer).
// "keys": 2 jobs of one ordering key (one enqueued while the other runs), 2 worker slots.
// "full": 3 jobs (2 of one key, 1 without a key, delayed), 2 worker slots.
const LEASE = ['-DNJ=1', '-DNKEYED=0'];
const KEYS = ['-DNJ=2', '-DNKEYED=2'];
const FULL = ['-DNJ=3', '-DNKEYED=2'];

const safety = (name, defines, extra = {}) => ({ name, kind: 'safety', defines, expect: 'hold', ...extra });
const liveness = (name, defines, extra = {}) => ({ name, kind: 'liveness', defines: ['-DLIVENESS', ...defines], expect: 'hold', ...extra });
const mutant = (name, defines, what, extra = {}) => ({ name, kind: 'safety', defines, expect: 'fail', what, ...extra });

const CHECKS = [
  safety('safety/lease', LEASE),
  safety('safety/keys', KEYS),
  liveness('liveness/lease', LEASE),
  liveness('liveness/keys', [...KEYS, '-DNOPAUSE']),
  mutant('mutant/D9', [...KEYS, '-DMUTANT_D9'], "cancel lets go of a running head's key at once"),
  mutant('mutant/D6', [...LEASE, '-DMUTANT_D6'], "the fence in a transaction compares with now(), frozen at BEGIN"),
  mutant('mutant/D3', [...LEASE, '-DMUTANT_D3'], 'a buffered job starts on whatever lease it has left'),
  mutant('mutant/D16', [...LEASE, '-DMUTANT_D16'], 'complete-many outcomes told by id, not (id, token)'),
  mutant('mutant/no-token', [...LEASE, '-DMUTANT_NO_TOKEN'], 'complete-many without the token check'),
  { ...mutant('mutant/no-end-expired-cancels', [...KEYS, '-DNOPAUSE', '-DMUTANT_NO_END_EXPIRED_CANCELS'], 'the reaper never ends cancelled attempts whose lease ran out'), kind: 'liveness', defines: ['-DLIVENESS', ...KEYS, '-DNOPAUSE', '-DMUTANT_NO_END_EXPIRED_CANCELS'] },
];
const DEEP = [
  safety('deep/safety/full', FULL, { cc: ['-DCOLLAPSE'], pan: ['-w26'] }),
  safety('deep/safety/keys-2-ops', [...KEYS, '-DOPS=2']),
  safety('deep/safety/lease-3-workers', [...LEASE, '-DNW=3']),
  safety('deep/safety/keys-3-workers', [...KEYS, '-DNW=3'], { cc: ['-DCOLLAPSE'], pan: ['-w26'] }),
  liveness('deep/liveness/keys-with-pause', KEYS),
];

function need(binary, pkg) {
  try {
    execFileSync('sh', ['-c', `command -v ${binary}`], { stdio: 'ignore' });
  } catch {
    process.stderr.write(`verify: ${binary} is not installed (Debian package ${pkg}: apt-get install spin gcc)\n`);
    process.exit(2);
  }
}

function run(command, argv, cwd) {
  return new Promise((resolve) => {
    const child = spawn(command, argv, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('close', (code) => resolve({ code, out }));
  });
}

// The steps of the model: each opens with a comment naming it ("/* claim: ..." -> "claim"),
// followed by its atomic sequence. Lines above the first process are inline helpers: part of the
// step that calls them.
const source = readFileSync(MODEL, 'utf8').split('\n');
const firstProcess = source.findIndex((l) => /^(active )?proctype /.test(l)) + 1;
const stepHeaders = [];
source.forEach((text, i) => {
  const m = /^\s*\/\*\s*([^:*]+?)\s*(?::|\*\/)/.exec(text);
  if (!m) return;
  let k = i + 1;
  while (k < source.length && /^\s*#/.test(source[k])) k++;
  if (/^\s*(::\s*)?(atomic|d_step)\b|^\s*::\s*!paused/.test(source[k] ?? '')) stepHeaders.push({ line: i + 1, name: m[1] });
});
function stepName(line) {
  if (line < firstProcess) return undefined;
  let name = 'start';
  for (const h of stepHeaders) if (h.line < line) name = h.name;
  return name;
}

// `spin -t -p`, one line per step of the model: its process and the step it took.
function shortTrail(text) {
  const steps = [];
  let last;
  for (const row of text.split('\n')) {
    if (/^#processes:/.test(row)) break;
    const m = /^\s*\d+:\s+proc\s+(\d+)\s+\((\w+):\d+\)\s+\S+:(\d+)\s/.exec(row);
    if (m) {
      const [, pid, proc, line] = m;
      const name = stepName(Number(line));
      if (name === undefined || (last && last.pid === pid && last.name === name && !last.closed)) continue;
      if (last && last.pid === pid && last.name === name && name === 'tick') {
        last.times += 1;
        continue;
      }
      last = { pid, who: `${proc}[${pid}]`, name, times: 1 };
      steps.push(last);
    } else if (/START OF CYCLE/.test(row)) {
      if (last) last.closed = true;
      steps.push({ text: '---- the cycle starts here (it repeats forever) ----' });
      last = undefined;
    } else if (/text of failed assertion/.test(row)) {
      steps.push({ text: row.replace(/^spin: /, '').trim() });
    }
  }
  let n = 0;
  return steps.map((s) => (s.text ? `          ${s.text}` : `    ${String(++n).padStart(4)}  ${s.who.padEnd(14)} ${s.name}${s.times > 1 ? ` (x${s.times})` : ''}`));
}

async function check(c) {
  const dir = mkdtempSync(join(tmpdir(), 'pgq-verify-'));
  const started = performance.now();
  try {
    copyFileSync(MODEL, join(dir, 'queue.pml'));
    const gen = await run('spin', [...c.defines, '-a', 'queue.pml'], dir);
    if (gen.code !== 0) return { c, ok: false, note: `spin -a failed:\n${gen.out}` };
    // A mutant's counterexample is found in a few hundred states: compiling fast matters more.
    const opt = c.expect === 'fail' ? '-O0' : '-O2';
    const cc = await run('gcc', ['-w', opt, ...(c.kind === 'safety' ? ['-DSAFETY'] : ['-DNFAIR=4']), ...(c.cc ?? []), '-o', 'pan', 'pan.c'], dir);
    if (cc.code !== 0) return { c, ok: false, note: `gcc failed:\n${cc.out}` };
    // A mutant's safety counterexample is shortened (-i: iterative search for a shorter trail).
    const search = c.kind === 'liveness' ? ['-a', '-f'] : c.expect === 'fail' ? ['-i'] : [];
    const pan = await run('./pan', ['-m1000000', ...search, ...(c.pan ?? [])], dir);
    const errors = Number(/errors: (\d+)/.exec(pan.out)?.[1] ?? NaN);
    const states = /(\d+) states, stored/.exec(pan.out)?.[1] ?? '?';
    const panSeconds = /elapsed time ([\d.e+]+) seconds/.exec(pan.out)?.[1] ?? '?';
    const result = { c, errors, states, panSeconds, seconds: (performance.now() - started) / 1000 };
    if (/max search depth too small/.test(pan.out)) return { ...result, ok: false, note: 'the search hit its depth bound (-m): not exhaustive' };
    if (Number.isNaN(errors)) return { ...result, ok: false, note: `pan did not finish:\n${pan.out}` };
    if (c.kind === 'liveness' && !/fairness enabled/.test(pan.out)) return { ...result, ok: false, note: 'the liveness search ran without weak fairness' };
    if (c.expect === 'hold') return { ...result, ok: errors === 0, note: errors === 0 ? '' : `counterexample:\n${shortTrail((await run('spin', [...c.defines, '-t', '-p', 'queue.pml'], dir)).out).join('\n')}` };
    if (errors === 0) return { ...result, ok: false, note: 'the mutant was NOT caught: the model holds with the defect put back' };
    const trail = await run('spin', [...c.defines, '-t', '-p', 'queue.pml'], dir);
    const failure = /(assertion violated.*|acceptance cycle.*)/.exec(pan.out)?.[1] ?? '';
    return { ...result, ok: true, note: `caught: ${failure.replace(/\s*\(at depth \d+\)/, '')}\n${shortTrail(trail.out).join('\n')}` };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

need('spin', 'spin');
need('gcc', 'gcc');
const checks = [...CHECKS, ...(deep ? DEEP : [])].filter((c) => !only || c.name.includes(only));
const parallel = Math.max(1, Math.min(2, availableParallelism()));
const started = performance.now();
const results = new Array(checks.length);
let next = 0;
let printed = 0;
const pending = new Map();
function flush() {
  while (printed < checks.length && results[printed] !== undefined) {
    const r = results[printed++];
    const verdict = r.ok ? (r.c.expect === 'hold' ? 'holds' : 'fails as it must') : 'SURPRISE';
    process.stdout.write(
      `${r.ok ? 'ok  ' : 'FAIL'} ${r.c.name.padEnd(34)} ${verdict.padEnd(17)} ${String(r.states ?? '?').padStart(9)} states  ${(r.seconds ?? 0).toFixed(1).padStart(6)} s${r.c.what ? `  (${r.c.what})` : ''}\n`,
    );
    if (r.note) process.stdout.write(`${r.note}\n`);
  }
}
await new Promise((resolve) => {
  const launch = () => {
    if (next >= checks.length) {
      if (pending.size === 0) resolve();
      return;
    }
    const i = next++;
    const p = check(checks[i]).then((r) => {
      results[i] = r;
      pending.delete(i);
      flush();
      launch();
    });
    pending.set(i, p);
  };
  for (let k = 0; k < parallel; k++) launch();
});
const failed = results.filter((r) => !r.ok);
process.stdout.write(
  `\n${checks.length - failed.length}/${checks.length} checks as expected in ${((performance.now() - started) / 1000).toFixed(1)} s (${deep ? 'deep' : 'everyday'} bounds; docs/how-we-know.md)\n`,
);
process.exit(failed.length === 0 ? 0 : 1);
