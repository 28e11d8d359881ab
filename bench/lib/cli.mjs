// What bench/sustained.mjs and bench/backlog.mjs share: the systems named by --systems, number
// formatting and an aligned text table.
import ours from '../ours.mjs';
import { PEERS, loadSystem } from '../systems.mjs';

/** `ours` (this checkout's dist/engine, or BENCH_ENGINE) and the peers named in `list`, in that order. */
export async function systemsFrom(list) {
  const names = [...new Set(list.split(',').map((s) => s.trim()).filter(Boolean))];
  const systems = [];
  for (const name of names) {
    if (name === 'ours') systems.push(ours);
    else if (PEERS[name]) systems.push(await loadSystem({ peer: name }));
    else throw new Error(`unknown system "${name}" (known: ours, ${Object.keys(PEERS).join(', ')})`);
  }
  return systems;
}

export function formatRate(value) {
  if (!Number.isFinite(value)) return 'n/a';
  return value >= 100 ? String(Math.round(value)) : value.toFixed(1);
}

export function formatRatio(value) {
  return Number.isFinite(value) ? `${value.toFixed(2)}×` : 'n/a';
}

/** Rows of cells → lines, the first `left` columns left-aligned, the others right-aligned. */
export function table(rows, left = 1) {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => String(r[i] ?? '').length)));
  const fmt = (r) => r.map((c, i) => (i < left ? String(c ?? '').padEnd(widths[i]) : String(c ?? '').padStart(widths[i]))).join('  ').trimEnd();
  return [fmt(rows[0]), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(fmt)];
}

export function progress(message) {
  process.stderr.write(`${message}\n`);
}

export function fail(message) {
  process.stderr.write(`bench: ${message}\n`);
  process.exit(2);
}
