// Summarizes a .cpuprofile: self time by function and by category (ours / pg driver / node internals / GC / idle).
//   node bench/probes/cpuprofile-summary.mjs FILE [topN]
import { readFileSync } from 'node:fs';
const [file, topN = 40] = process.argv.slice(2);
const p = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const self = new Map();
for (let i = 0; i < p.samples.length; i++) {
  const dt = p.timeDeltas[i + 1] ?? 0;
  self.set(p.samples[i], (self.get(p.samples[i]) ?? 0) + dt);
}
const total = [...self.values()].reduce((a, b) => a + b, 0);
const cat = (n) => {
  const { url, functionName } = n.callFrame;
  if (functionName === '(garbage collector)') return 'GC';
  if (functionName === '(idle)') return 'idle';
  if (functionName === '(program)') return 'program (native, unattributed)';
  if (/dist\/engine/.test(url)) return 'ours (dist/engine)';
  if (/node_modules\/(pg|pg-protocol|pg-types|pg-pool|postgres-[a-z]+|pgpass|pg-connection-string)\//.test(url)) return 'pg driver';
  if (/bench\//.test(url)) return 'bench harness';
  if (/^node:|^internal/.test(url) || url === '') return 'node internals / builtins';
  return 'other: ' + url.split('/').slice(-3).join('/');
};
const cats = new Map();
const fns = new Map();
for (const [id, t] of self) {
  const n = byId.get(id);
  const c = cat(n);
  cats.set(c, (cats.get(c) ?? 0) + t);
  const key = `${n.callFrame.functionName || '(anon)'} ${n.callFrame.url.replace(/.*\/(node_modules|dist)\//, '$1/')}:${n.callFrame.lineNumber + 1}`;
  fns.set(key, (fns.get(key) ?? 0) + t);
}
console.log(`total ${(total / 1000).toFixed(0)} ms sampled`);
for (const [c, t] of [...cats].sort((a, b) => b[1] - a[1])) console.log(`${((100 * t) / total).toFixed(1).padStart(5)} %  ${(t / 1000).toFixed(0).padStart(6)} ms  ${c}`);
console.log('--- top self time');
for (const [k, t] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, Number(topN))) console.log(`${((100 * t) / total).toFixed(1).padStart(5)} %  ${(t / 1000).toFixed(0).padStart(6)} ms  ${k}`);
// Inclusive time of our engine's frames (children included), by function
const parent = new Map();
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const incl = new Map();
for (const [id, t] of self) {
  const seen = new Set();
  for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
    const n = byId.get(cur);
    if (!/dist\/engine/.test(n.callFrame.url)) continue;
    const key = `${n.callFrame.functionName || '(anon)'} ${n.callFrame.url.replace(/.*\/dist\//, '')}:${n.callFrame.lineNumber + 1}`;
    if (seen.has(key)) continue;
    seen.add(key);
    incl.set(key, (incl.get(key) ?? 0) + t);
  }
}
console.log('--- inclusive time of engine functions');
for (const [k, t] of [...incl].sort((a, b) => b[1] - a[1]).slice(0, 30)) console.log(`${((100 * t) / total).toFixed(1).padStart(5)} %  ${(t / 1000).toFixed(0).padStart(6)} ms  ${k}`);
// Self time charged to the nearest ancestor that is ours or the driver's (builtins called by them count as theirs).
const owner = new Map();
for (const [id, t] of self) {
  let c = cat(byId.get(id));
  if (c === 'node internals / builtins' || c.startsWith('other:')) {
    for (let cur = parent.get(id); cur !== undefined; cur = parent.get(cur)) {
      const cc = cat(byId.get(cur));
      if (cc === 'ours (dist/engine)' || cc === 'pg driver' || cc === 'bench harness') { c = cc + ' (+ builtins/otel it calls)'; break; }
    }
  }
  owner.set(c, (owner.get(c) ?? 0) + t);
}
console.log('--- self time charged to the nearest ours/driver ancestor');
for (const [c, t] of [...owner].sort((a, b) => b[1] - a[1])) console.log(`${((100 * t) / total).toFixed(1).padStart(5)} %  ${(t / 1000).toFixed(0).padStart(6)} ms  ${c}`);
const internal = new Map();
for (const [id, t] of self) {
  const n = byId.get(id);
  if (cat(n) !== 'node internals / builtins') continue;
  let anc = '(root)';
  for (let cur = parent.get(id); cur !== undefined; cur = parent.get(cur)) {
    const a = byId.get(cur);
    if (cat(a) !== 'node internals / builtins') { anc = `${a.callFrame.functionName || '(anon)'} ${a.callFrame.url.replace(/.*\/(node_modules|dist)\//, '$1/')}:${a.callFrame.lineNumber + 1}`; break; }
  }
  const key = `${n.callFrame.functionName || '(anon)'} <- ${anc}`;
  internal.set(key, (internal.get(key) ?? 0) + t);
}
console.log('--- builtins by their nearest non-builtin caller');
for (const [k, t] of [...internal].sort((a, b) => b[1] - a[1]).slice(0, 30)) console.log(`${((100 * t) / total).toFixed(1).padStart(5)} %  ${(t / 1000).toFixed(0).padStart(6)} ms  ${k}`);
