// The docs are true to the code: what they name exists, and what the code has is documented. No
// database: it reads README.md and docs/*.md, and asks the code itself (the option schema through
// the module's resolver, the Prometheus renderer, the OpenTelemetry meter, the error classes).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { metrics as otel } from '@opentelemetry/api';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import type { Field, Section } from '../lib/engine/config.js';
import { EngineMetrics, HISTOGRAM_BUCKETS, InvalidOptionError, renderPrometheus, type EngineStats, type HistogramName } from '../lib/engine/index.js';
import { ENGINE_OPTIONS } from '../lib/engine/options.js';
import * as rootBarrel from '../lib/index.js';
import * as engineBarrel from '../lib/engine/index.js';
import * as dashboardBarrel from '../lib/dashboard/index.js';
import { resolveModuleConfig } from '../lib/nest/pg-queue.options.js';
import { PgQueueModule } from '../lib/pg-queue.module.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const DOCS = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');

/** The text outside fenced code blocks (code samples are checked by the compiler and the tests that run them). */
function prose(text: string): string {
  let fenced = false;
  return text
    .split('\n')
    .map((line) => {
      if (line.startsWith('```')) {
        fenced = !fenced;
        return '';
      }
      return fenced ? '' : line;
    })
    .join('\n');
}

/** GitHub's anchors of a Markdown file's headings (lower case, punctuation dropped, spaces to dashes, -1 for repeats). */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const [, heading] of prose(text).matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const base = heading!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Backticked spans outside code blocks. */
function codeSpans(text: string): string[] {
  return [...prose(text).matchAll(/`([^`\n]+)`/g)].map((m) => m[1]!);
}

/**
 * docs/architecture.md describes the layout that lib/engine/store/ starts (issue 13): it may be
 * missing until that layout lands, and not after. Delete this exemption with the page.
 */
const ARCHITECTURE = 'docs/architecture.md';

describe('links', () => {
  test.each(DOCS)('every relative link in %s resolves to a file, and its #anchor to a heading', (file) => {
    const broken: string[] = [];
    for (const [, target] of prose(read(file)).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target!)) continue; // https:, mailto:
      const [path, anchor] = target!.split('#') as [string, string | undefined];
      const resolved = path === '' ? join(ROOT, file) : resolve(dirname(join(ROOT, file)), path);
      if (!existsSync(resolved)) {
        if (relative(ROOT, resolved) === ARCHITECTURE && !existsSync(join(ROOT, 'lib/engine/store'))) continue;
        broken.push(`${target}: no file ${relative(ROOT, resolved)}`);
        continue;
      }
      if (anchor !== undefined && statSync(resolved).isFile() && resolved.endsWith('.md') && !anchors(readFileSync(resolved, 'utf8')).has(anchor)) {
        broken.push(`${target}: no heading #${anchor} in ${relative(ROOT, resolved)}`);
      }
    }
    expect(broken).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------------
// Options: docs/configuration.md's tables against the schema.

interface OptionRow {
  names: string[];
  default: string;
  bounds: string;
}

/** Rows of the tables whose first column is "option" (per-job enqueue options are not in the schema). */
function optionRows(text: string): OptionRow[] {
  const rows: OptionRow[] = [];
  let inTable = false;
  for (const line of prose(text).split('\n')) {
    if (!line.startsWith('|')) {
      inTable = false;
      continue;
    }
    const cells = line
      .slice(1, -1)
      .split(/(?<!\\)\|/)
      .map((c) => c.trim());
    if (/^-+$/.test(cells[0]!.replace(/:/g, ''))) continue;
    if (cells[0] === 'option') {
      inTable = true;
      continue;
    }
    if (!inTable) continue;
    rows.push({ names: [...cells[0]!.matchAll(/`([^`]+)`/g)].map((m) => m[1]!), default: cells[1]!, bounds: cells[2]! });
  }
  return rows;
}

const CONNECTION = 'postgres://docs.invalid/db';

/** `options` with `value` at `path` ("reaper.intervalMs"). */
function withOption(path: string, value: unknown): Record<string, unknown> {
  const options: Record<string, unknown> = { connectionString: CONNECTION };
  const parts = path.split('.');
  let at = options;
  for (const part of parts.slice(0, -1)) at = (at[part] ??= {}) as Record<string, unknown>;
  at[parts.at(-1)!] = value;
  return options;
}

/** Whether the module accepts `value` for the option at `path`; an error about another option is a test bug. */
function accepts(path: string, value: unknown): boolean {
  try {
    resolveModuleConfig(withOption(path, value) as never, () => {});
    return true;
  } catch (error) {
    if (error instanceof InvalidOptionError && error.option === path) return false;
    throw error;
  }
}

const PROBE = '__not_an_option__';

/**
 * Every name the module accepts, nested sections included, as the module itself reports them: an
 * unknown name is refused with the list of the section's names. (The module's section is its
 * own, not exported: asking the resolver keeps this test on what users get.)
 */
function moduleOptionNames(path = ''): string[] {
  const probe = path ? `${path}.${PROBE}` : PROBE;
  let message: string | undefined;
  try {
    resolveModuleConfig(withOption(probe, 1) as never, () => {});
  } catch (error) {
    if (error instanceof InvalidOptionError && error.option === probe) message = error.message;
  }
  const list = message?.match(/use one of: (.+)\.$/)?.[1];
  if (list === undefined) throw new Error(`The module did not list the options of "${path || 'the module'}" (${message})`);
  const names: string[] = [];
  for (const name of list.split(', ')) {
    const full = path ? `${path}.${name}` : name;
    names.push(full);
    // A section refuses an unknown name inside it; a leaf (or an opaque object) does not list any.
    let nested = false;
    try {
      resolveModuleConfig(withOption(`${full}.${PROBE}`, 1) as never, () => {});
    } catch (error) {
      nested = error instanceof InvalidOptionError && error.option === `${full}.${PROBE}`;
    }
    if (nested) names.push(...moduleOptionNames(full));
  }
  return names;
}

/** The engine's own section, walked: names only `new PgQueue()` takes (its logger). */
function engineOptionNames(section: Section<object> = ENGINE_OPTIONS as Section<object>, path = ''): string[] {
  return Object.entries(section.fields as Record<string, Field>).flatMap(([name, field]) => {
    const full = path ? `${path}.${name}` : name;
    return field.kind === 'section' ? [full, ...engineOptionNames(field.section, full)] : [full];
  });
}

/** The value at `path` of what the module resolved from no options: module-only ones at the top, the engine's under `engine`. */
function resolvedDefault(path: string): unknown {
  const config = resolveModuleConfig({ connectionString: CONNECTION }, () => {}) as unknown as Record<string, unknown>;
  const lookup = (from: unknown) => path.split('.').reduce<unknown>((at, part) => (at as Record<string, unknown> | undefined)?.[part], from);
  return lookup(config) ?? lookup(config.engine);
}

/** `2147483647`, `-1000`, `0.1`; a cell's numbers in order. */
function numbersIn(cell: string): number[] {
  return [...cell.matchAll(/`(-?[0-9][0-9_]*(?:\.[0-9]+)?)`/g)].map((m) => Number(m[1]!.replaceAll('_', '')));
}

describe('options: docs/configuration.md', () => {
  const rows = optionRows(read('docs/configuration.md'));
  const documented = rows.flatMap((r) => r.names);
  const moduleNames = moduleOptionNames();
  // `isGlobal` shapes the module (ConfigurableModuleBuilder's extra), it is not a queue option.
  const known = new Set([...moduleNames, ...engineOptionNames(), 'isGlobal']);

  test('the tables list options', () => {
    expect(rows.length).toBeGreaterThan(40);
  });

  test('every option named in the tables is one the module or the engine accepts', () => {
    expect(documented.filter((name) => !known.has(name))).toEqual([]);
  });

  test('every option the module or the engine accepts is in a table (sections may be left to their fields)', () => {
    const sections = new Set([...known].filter((name) => [...known].some((other) => other.startsWith(`${name}.`))));
    expect([...known].filter((name) => !sections.has(name) && !documented.includes(name))).toEqual([]);
  });

  test('each default in the tables is the schema\'s default', () => {
    const wrong: string[] = [];
    for (const row of rows) {
      if (row.names.length !== 1) continue;
      const [name] = row.names as [string];
      if (name === 'isGlobal') continue; // below
      const actual = resolvedDefault(name);
      if (actual !== null && typeof actual === 'object' && !Array.isArray(actual)) continue; // a section: its fields have rows
      const literal = row.default.match(/^`([^`]+)`/)?.[1];
      if (name === 'connectionString') continue; // the probe's own value
      // No literal ("—", "generated", "a tenth of …"): computed at run time, so the schema has none.
      const expected = literal === undefined ? undefined : (JSON.parse(literal.replaceAll('_', '')) as unknown);
      if (JSON.stringify(actual) !== JSON.stringify(expected)) wrong.push(`${name}: documented ${row.default}, schema ${JSON.stringify(actual)}`);
    }
    expect(wrong).toEqual([]);
  });

  test('isGlobal defaults to true and false makes the module local', () => {
    expect(PgQueueModule.forRoot({ connectionString: CONNECTION }).global).toBe(true);
    expect(PgQueueModule.forRoot({ connectionString: CONNECTION, isGlobal: false }).global).toBe(false);
  });

  test('each numeric bound in the tables is where the schema accepts and refuses', () => {
    const wrong: string[] = [];
    for (const row of rows) {
      if (row.names.length !== 1 || !moduleNames.includes(row.names[0]!)) continue;
      const [name] = row.names as [string];
      const [min, max] = numbersIn(row.bounds);
      if (min === undefined) continue;
      const step = Number.isInteger(min) && (max === undefined || Number.isInteger(max)) ? 1 : 0.001;
      if (!accepts(name, min)) wrong.push(`${name}: refuses its documented minimum ${min}`);
      if (accepts(name, min - step)) wrong.push(`${name}: accepts ${min - step}, below its documented minimum`);
      if (max === undefined) continue;
      if (!accepts(name, max)) wrong.push(`${name}: refuses its documented maximum ${max}`);
      if (accepts(name, max + step)) wrong.push(`${name}: accepts ${max + step}, above its documented maximum`);
    }
    expect(wrong).toEqual([]);
  });

  test('each listed value of a choice is accepted, and another is refused', () => {
    const migrations = rows.find((r) => r.names[0] === 'migrations')!;
    const values = [...migrations.bounds.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
    expect(values.length).toBeGreaterThan(1);
    for (const value of values) expect(accepts('migrations', value), value).toBe(true);
    expect(accepts('migrations', 'sometimes')).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------------
// Metrics: every series name in the docs against what the code emits.

const stats: EngineStats = {
  at: new Date(),
  listener: { listening: true, downForMs: 0 },
  pool: { total: 1, idle: 1, waiting: 0 },
  workers: [{ queue: 'docs', busy: 0, total: 1 }],
  recentWindowMs: 60_000,
  database: { connections: 1, lockWaits: 0 },
  schedules: {
    queues: [{ queue: 'docs', active: 1, paused: 0, maxLateMs: 0, nextTickAt: new Date(), lastTickAt: null, ticks: { run: 0, missed: 0, skipped: 0 } }],
    late: [],
  },
  queues: [
    {
      queue: 'docs',
      paused: false,
      pausedAt: null,
      counts: { scheduled: 0, pending: 0, running: 0, dead: 0, recent: { succeeded: 0, cancelled: 0 } },
      oldestClaimableAgeMs: null,
      oldestDeadAgeMs: null,
      runningNearExpiry: 0,
      blockedKeys: 0,
      flow: undefined,
      blockedFlows: 0,
      slots: { busy: 0, total: 1 },
    },
  ],
};

/** Every Prometheus family the renderer declares (it declares each even before it has a sample). */
function prometheusFamilies(): Map<string, string> {
  const text = renderPrometheus(new EngineMetrics(), stats);
  return new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
}

class Reader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

/** Every OpenTelemetry instrument the engine creates, read from a real SDK after one of each is used. */
async function openTelemetryNames(): Promise<string[]> {
  const reader = new Reader();
  const provider = new MeterProvider({ readers: [reader] });
  otel.setGlobalMeterProvider(provider);
  try {
    const metrics = new EngineMetrics();
    metrics.handles('docs');
    for (const counter of ['jobs_retried', 'jobs_dead'] as const) metrics.increment(counter, { queue: 'docs', code: 'X', attempt: 1 });
    // Only with events.crossProcess on (ClusterEvents creates them at 0 then).
    metrics.increment('cluster_events_published', {}, 0);
    metrics.increment('cluster_events_dropped', { reason: 'buffer_full' }, 0);
    for (const histogram of Object.keys(HISTOGRAM_BUCKETS) as HistogramName[]) metrics.observe(histogram, 0.01, { queue: 'docs' });
    const { resourceMetrics } = await reader.collect();
    return resourceMetrics.scopeMetrics.filter((s) => s.scope.name === 'nestjs-pg-queue').flatMap((s) => s.metrics.map((m) => m.descriptor.name));
  } finally {
    otel.disable();
    await provider.shutdown();
  }
}

describe('metrics: docs/metrics.md', () => {
  const families = prometheusFamilies();
  /** A family's samples: a histogram's _bucket, _sum and _count are its own. */
  const emitted = (name: string) => families.has(name) || families.get(name.replace(/_(bucket|sum|count)$/, '')) === 'histogram';

  test('the renderer declares families (the test reads them right)', () => {
    expect(families.size).toBeGreaterThan(20);
  });

  test.each(DOCS)('every Prometheus series named in %s is one the code emits', (file) => {
    const named = new Set(codeSpans(read(file)).flatMap((span) => [...span.matchAll(/\bpgqueue_[a-z_]+[a-z]\b/g)].map((m) => m[0])));
    expect([...named].filter((name) => !emitted(name))).toEqual([]);
  });

  test('every Prometheus family the code emits is in docs/metrics.md', () => {
    const text = read('docs/metrics.md');
    expect([...families.keys()].filter((name) => !new RegExp(`\\b${name}\\b`).test(text))).toEqual([]);
  });

  test('every OpenTelemetry instrument named in docs/metrics.md is one the code creates, and vice versa', async () => {
    const created = await openTelemetryNames();
    expect(created.length).toBeGreaterThan(10);
    const named = new Set(codeSpans(read('docs/metrics.md')).flatMap((span) => [...span.matchAll(/\bpgqueue\.[a-z_]+[a-z]\b/g)].map((m) => m[0])));
    // The span attributes the tracing sets (pgqueue.attempt) share the prefix: they are its literals.
    const attributes = new Set([...read('lib/engine/tracing.ts').matchAll(/'(pgqueue\.[a-z_]+)'/g)].map((m) => m[1]!));
    expect(attributes.size).toBeGreaterThan(0);
    expect([...named].filter((name) => !created.includes(name) && !attributes.has(name))).toEqual([]);
    expect([...attributes].filter((name) => !named.has(name))).toEqual([]);
    for (const name of attributes) named.delete(name);
    expect(created.filter((name) => !named.has(name))).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------------
// Error codes.

/** Codes of the errors the queue throws: the string literals of lib/engine/errors.ts. */
const ERROR_CODES = new Set([...read('lib/engine/errors.ts').matchAll(/'([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)'/g)].map((m) => m[1]!));

/** Every string literal of the engine's and the sample's sources: failure codes the engine writes on jobs, codes the sample's handlers throw. */
function literals(dir: string): Set<string> {
  const out = new Set<string>();
  for (const entry of readdirSync(join(ROOT, dir), { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.ts')) continue;
    const text = readFileSync(join(entry.parentPath, entry.name), 'utf8');
    for (const m of text.matchAll(/['"`]([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)['"`]/g)) out.add(m[1]!);
  }
  return out;
}

describe('error codes', () => {
  const exported = new Set([...Object.keys(rootBarrel), ...Object.keys(engineBarrel), ...Object.keys(dashboardBarrel)]);
  // lib/testing: the test kit's error codes (TestDatabaseError, RunJobError) are documented in docs/testing.md;
  // lib/dashboard: the dashboard's (DashboardError), in docs/dashboard.md.
  const engineLiterals = new Set([...literals('lib/engine'), ...literals('lib/testing'), ...literals('lib/dashboard')]);
  const sampleLiterals = literals('sample-app');
  // Read by scripts and tests, not codes.
  const environment = new Set(
    [read('scripts/with-postgres.mjs'), read('test/browser/dashboard.browser.spec.ts')].flatMap((text) => [...text.matchAll(/\b(?:process\.)?env\.([A-Z_]+)/g)].map((m) => m[1]!)),
  );

  test('errors.ts has the codes this test looks for', () => {
    expect(ERROR_CODES.has('LEASE_LOST')).toBe(true);
    expect(ERROR_CODES.size).toBeGreaterThan(20);
  });

  // docs/decisions.md is a record: it names what a decision removed (HISTOGRAM_BUCKETS_MS).
  test.each(DOCS.filter((f) => f !== 'docs/decisions.md'))('every error code named in %s is one the code raises or writes', (file) => {
    const unknown: string[] = [];
    for (const span of codeSpans(read(file))) {
      if (!/^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$/.test(span)) continue;
      if (exported.has(span) || environment.has(span)) continue; // an exported constant, an environment variable
      if (/^SQLSTATE_[0-9A-Z]{5}$/.test(span)) continue; // built from the SQLSTATE (retry.ts)
      if (ERROR_CODES.has(span) || engineLiterals.has(span) || sampleLiterals.has(span)) continue;
      unknown.push(span);
    }
    expect(unknown).toEqual([]);
  });

  test('every code of an error the queue throws is documented', () => {
    const documented = new Set(DOCS.filter((f) => f !== 'docs/decisions.md').flatMap((f) => codeSpans(read(f))));
    expect([...ERROR_CODES].filter((code) => !documented.has(code))).toEqual([]);
  });
});
