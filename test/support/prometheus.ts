import { spawnSync } from 'node:child_process';

/**
 * A small reader of the Prometheus text exposition format, for tests that scrape `/metrics`:
 * `value(text, 'pgqueue_jobs', { queue: 'a', status: 'dead' })` is the sample whose labels are
 * exactly those, or undefined when there is none.
 */
export interface PrometheusSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

const SAMPLE_LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/gy;

export function parsePrometheus(text: string): PrometheusSample[] {
  const samples: PrometheusSample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = SAMPLE_LINE.exec(line);
    if (!match) throw new Error(`not a Prometheus sample line: ${JSON.stringify(line)}`);
    const labels: Record<string, string> = {};
    const body = match[2] ?? '';
    LABEL.lastIndex = 0;
    while (LABEL.lastIndex < body.length) {
      const label = LABEL.exec(body);
      if (!label) throw new Error(`bad labels in ${JSON.stringify(line)}`);
      labels[label[1]!] = label[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    }
    const raw = match[3]!;
    const value = raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw);
    samples.push({ name: match[1]!, labels, value });
  }
  return samples;
}

/** The value of the sample with exactly these labels, or undefined. */
export function value(text: string, name: string, labels: Record<string, string | number> = {}): number | undefined {
  const wanted = Object.entries(labels).map(([k, v]) => [k, String(v)] as const);
  const sample = parsePrometheus(text).find(
    (s) => s.name === name && Object.keys(s.labels).length === wanted.length && wanted.every(([k, v]) => s.labels[k] === v),
  );
  return sample?.value;
}

/** The `# TYPE` of a metric family, or undefined when the exposition does not declare it. */
export function familyType(text: string, name: string): string | undefined {
  return new RegExp(`^# TYPE ${name} (\\w+)$`, 'm').exec(text)?.[1];
}

/**
 * `promtool check metrics` (Debian package `prometheus`) on an exposition: its exit code and what
 * it said (one problem a line, on stderr). Throws one clear line when promtool is not installed.
 */
export function promtoolCheckMetrics(text: string): { status: number; problems: string } {
  const result = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if ((result.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    throw new Error('promtool is not installed: install the Debian package "prometheus" (apt-get install prometheus) to run npm run test:prometheus.');
  }
  if (result.error) throw result.error;
  return { status: result.status ?? -1, problems: `${result.stdout}${result.stderr}`.trim() };
}

/**
 * What Prometheus's `histogram_quantile(q, …)` reads from one series of a histogram in an
 * exposition: the bucket the rank falls in, interpolated linearly within it (from 0 for the
 * first bucket; the highest finite bound when it falls in +Inf).
 */
export function histogramQuantile(text: string, name: string, labels: Record<string, string | number>, q: number): number {
  const wanted = Object.entries(labels).map(([k, v]) => [k, String(v)] as const);
  const buckets = parsePrometheus(text)
    .filter((s) => s.name === `${name}_bucket` && Object.keys(s.labels).length === wanted.length + 1 && wanted.every(([k, v]) => s.labels[k] === v))
    .map((s) => ({ le: s.labels.le === '+Inf' ? Infinity : Number(s.labels.le), count: s.value }))
    .sort((a, b) => a.le - b.le);
  if (buckets.length === 0 || buckets.at(-1)!.le !== Infinity) throw new Error(`no buckets of ${name} ${JSON.stringify(labels)} (with +Inf)`);
  const rank = q * buckets.at(-1)!.count;
  const i = buckets.findIndex((b) => b.count >= rank);
  if (buckets[i]!.le === Infinity) return buckets[i - 1]?.le ?? NaN;
  const below = i === 0 ? { le: 0, count: 0 } : buckets[i - 1]!;
  return below.le + (buckets[i]!.le - below.le) * ((rank - below.count) / (buckets[i]!.count - below.count));
}
