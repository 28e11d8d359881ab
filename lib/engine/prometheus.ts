import type { CounterName, EngineMetrics, HistogramName, Labels } from './metrics.js';
import type { EngineStats, ProcessStats } from './records.js';
import type { FinishedJobStatus, LiveJobStatus } from './types.js';

/** How long a scrape waits for the database's snapshot (`PgQueue.prometheus()`): under Prometheus's default scrape timeout of 10 s. */
export const PROMETHEUS_TIMEOUT_DEFAULT_MS = 5_000;

const LIVE_JOB_STATUSES: readonly LiveJobStatus[] = ['scheduled', 'pending', 'running', 'dead'];
const FINISHED_JOB_STATUSES: readonly FinishedJobStatus[] = ['succeeded', 'cancelled'];

/**
 * The Prometheus text exposition of a process's counters and histograms plus a snapshot: a
 * `PgQueue.stats()` (the database answered: `pgqueue_database_up 1`), or only its
 * `processStats()` (it did not: `pgqueue_database_up 0`, and the gauges read from the database
 * are left out rather than reported as zeros). Counters and histograms are this process's; gauges
 * read from the database are the whole queue's, so scrape one process for them or aggregate with
 * `max`. Each family it renders is one group (HELP, TYPE, then its samples), declared even before
 * it has a sample.
 */
export function renderPrometheus(metrics: EngineMetrics, stats: EngineStats | ProcessStats): string {
  const out: string[] = [];
  const family = (name: string, type: 'counter' | 'gauge' | 'histogram', help: string) => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
  };
  const sample = (name: string, labels: Labels, value: number) => out.push(`${name}${formatLabels(labels)} ${formatValue(value)}`);

  const counters = metrics.snapshot();
  for (const [counter, help] of Object.entries(COUNTER_HELP)) {
    const name = `pgqueue_${counter}_total`;
    family(name, 'counter', help);
    for (const c of counters.filter((c) => c.name === counter)) sample(name, c.labels, c.value);
  }

  const histograms = metrics.histogramSnapshot();
  for (const [histogram, help] of Object.entries(HISTOGRAM_HELP)) {
    const name = `pgqueue_${histogram}`;
    family(name, 'histogram', help);
    for (const h of histograms.filter((h) => h.name === histogram)) {
      h.bounds.forEach((le, i) => sample(`${name}_bucket`, { ...h.labels, le }, h.buckets[i]!));
      sample(`${name}_bucket`, { ...h.labels, le: '+Inf' }, h.count);
      sample(`${name}_sum`, h.labels, h.sum);
      sample(`${name}_count`, h.labels, h.count);
    }
  }

  // This process's own gauges: there whether or not the database answered.
  // Each family's samples follow its own HELP and TYPE, one group per family, as the format wants.
  family('pgqueue_worker_slots', 'gauge', "This process's handler slots per queue.");
  for (const w of stats.workers) sample('pgqueue_worker_slots', { queue: w.queue }, w.total);
  family('pgqueue_worker_busy_slots', 'gauge', "This process's busy handler slots per queue.");
  for (const w of stats.workers) sample('pgqueue_worker_busy_slots', { queue: w.queue }, w.busy);
  family('pgqueue_worker_saturation', 'gauge', 'Busy slots over total slots (1 = saturated).');
  for (const w of stats.workers) sample('pgqueue_worker_saturation', { queue: w.queue }, w.busy / w.total);
  family('pgqueue_listener_up', 'gauge', '1 while the LISTEN connection is up and hears its probe NOTIFY.');
  sample('pgqueue_listener_up', {}, stats.listener.listening ? 1 : 0);
  family('pgqueue_listener_down_seconds', 'gauge', 'How long the LISTEN connection has been down or deaf (0 when up).');
  sample('pgqueue_listener_down_seconds', {}, stats.listener.downForMs / 1_000);
  family('pgqueue_pool_connections', 'gauge', "The pool's connections by state.");
  sample('pgqueue_pool_connections', { state: 'total' }, stats.pool.total);
  sample('pgqueue_pool_connections', { state: 'idle' }, stats.pool.idle);
  sample('pgqueue_pool_connections', { state: 'waiting' }, stats.pool.waiting);

  const answered = 'queues' in stats;
  family('pgqueue_database_up', 'gauge', '1 when this scrape read the database; 0 when it failed or did not answer in time (its gauges are then left out).');
  sample('pgqueue_database_up', {}, answered ? 1 : 0);
  // Left out, not zeros: a 0 would read as an empty queue, and its alerts would clear.
  if (!answered) return `${out.join('\n')}\n`;

  // Every status of every declared queue, zeros included: a series that vanishes is not a zero.
  // Succeeded and cancelled jobs are history, not a state to watch: counting them would make every
  // scrape read everything retained, so they are counted over a recent window only.
  family('pgqueue_jobs', 'gauge', 'Jobs per queue and live status (scheduled, pending, running, dead), from the database.');
  for (const q of stats.queues) for (const status of LIVE_JOB_STATUSES) sample('pgqueue_jobs', { queue: q.queue, status }, q.counts[status]);
  family(
    'pgqueue_jobs_finished_recent',
    'gauge',
    `Jobs per queue that finished (succeeded, cancelled) within the last ${formatValue(stats.recentWindowMs / 1_000)} s, from the database.`,
  );
  for (const q of stats.queues) {
    for (const status of FINISHED_JOB_STATUSES) sample('pgqueue_jobs_finished_recent', { queue: q.queue, status }, q.counts.recent[status]);
  }
  family('pgqueue_oldest_claimable_age_seconds', 'gauge', 'Age of the oldest job that is due and unclaimed: alert on this.');
  for (const q of stats.queues) sample('pgqueue_oldest_claimable_age_seconds', { queue: q.queue }, (q.oldestClaimableAgeMs ?? 0) / 1_000);
  family('pgqueue_oldest_dead_age_seconds', 'gauge', 'Age of the oldest unresolved dead job.');
  for (const q of stats.queues) sample('pgqueue_oldest_dead_age_seconds', { queue: q.queue }, (q.oldestDeadAgeMs ?? 0) / 1_000);
  family('pgqueue_running_near_lease_expiry', 'gauge', 'Running jobs whose lease ends within the near-expiry window.');
  for (const q of stats.queues) sample('pgqueue_running_near_lease_expiry', { queue: q.queue }, q.runningNearExpiry);
  family('pgqueue_queue_paused', 'gauge', '1 when the queue is paused.');
  for (const q of stats.queues) sample('pgqueue_queue_paused', { queue: q.queue }, q.paused ? 1 : 0);
  // Flow control, for the queues that have it on: aggregates only (a group label would make a
  // series per tenant; stats() has the top groups).
  const flows = stats.queues.flatMap((q) => (q.flow ? [q.flow] : []));
  family('pgqueue_flow_running', 'gauge', 'Running jobs (slots in use) of a queue under flow control, across every process.');
  for (const f of flows) sample('pgqueue_flow_running', { queue: f.queue }, f.running);
  family('pgqueue_flow_global_concurrency', 'gauge', "A queue's globalConcurrency limit (left out without one).");
  for (const f of flows) if (f.limits.globalConcurrency !== null) sample('pgqueue_flow_global_concurrency', { queue: f.queue }, f.limits.globalConcurrency);
  family('pgqueue_flow_groups', 'gauge', 'Groups with running or waiting jobs in a queue under flow control.');
  for (const f of flows) sample('pgqueue_flow_groups', { queue: f.queue }, f.groupCount);
  family('pgqueue_flow_held_by_rate_limit', 'gauge', 'Waiting jobs that a rate limit or a throttle (RateLimitedError) holds back right now.');
  for (const f of flows) sample('pgqueue_flow_held_by_rate_limit', { queue: f.queue }, f.heldByRateLimit);
  // Recurring schedules, per queue (a schedule label would make a series per tenant's schedule;
  // stats().schedules.late and schedules.list() name them).
  family('pgqueue_schedules', 'gauge', 'Recurring schedules per queue and state (active, paused), from the database.');
  for (const q of stats.schedules.queues) {
    sample('pgqueue_schedules', { queue: q.queue, state: 'active' }, q.active);
    sample('pgqueue_schedules', { queue: q.queue, state: 'paused' }, q.paused);
  }
  family('pgqueue_schedule_late_seconds', 'gauge', "How long the most late active schedule of a queue has had a tick due and not handled: alert on this.");
  for (const q of stats.schedules.queues) sample('pgqueue_schedule_late_seconds', { queue: q.queue }, q.maxLateMs / 1_000);
  family('pgqueue_schedule_ticks', 'gauge', "Every tick of a queue's schedules so far, by outcome (run, missed, skipped), across every process, from the database.");
  for (const q of stats.schedules.queues) {
    for (const outcome of ['run', 'missed', 'skipped'] as const) sample('pgqueue_schedule_ticks', { queue: q.queue, outcome }, q.ticks[outcome]);
  }
  family('pgqueue_schedule_next_tick_seconds', 'gauge', "Seconds until the soonest next tick of a queue's active schedules (negative: due).");
  for (const q of stats.schedules.queues) if (q.nextTickAt) sample('pgqueue_schedule_next_tick_seconds', { queue: q.queue }, (q.nextTickAt.getTime() - stats.at.getTime()) / 1_000);
  family('pgqueue_database_connections', 'gauge', 'Sessions on the database.');
  sample('pgqueue_database_connections', {}, stats.database.connections);
  family('pgqueue_database_lock_waits', 'gauge', 'Sessions on the database waiting on a lock right now.');
  sample('pgqueue_database_lock_waits', {}, stats.database.lockWaits);
  return `${out.join('\n')}\n`;
}

const COUNTER_HELP: Record<CounterName, string> = {
  jobs_claimed: 'Jobs claimed by this process.',
  jobs_succeeded: 'Jobs completed by this process (fenced).',
  jobs_retried: 'Failed attempts scheduled for retry, by error code and attempt.',
  jobs_dead: 'Jobs that went dead (from a failure here, or reaped by this process), by error code.',
  jobs_released: 'Jobs handed back at shutdown.',
  jobs_rate_limited: 'Attempts whose handler reported a rate limit (RateLimitedError): their group or queue was throttled.',
  lease_lost: 'Fenced writes refused: the worker no longer owned the job (lost-fence attempts), by reason and operation.',
  lease_expired: "Expired leases recovered by this process's reaper, by code (LEASE_EXPIRED, MAX_RUNTIME, REAP_FAILED).",
  heartbeats: 'Lease renewals written.',
  heartbeat_failures: 'Heartbeats that failed to reach the database.',
  claim_queries: 'Claim statements run (throughput: rate of jobs_succeeded; claim efficiency: jobs_claimed / claim_queries).',
  cluster_events_published: "Job events of this process sent to the other processes (events.crossProcess), in NOTIFYs that committed.",
  cluster_events_dropped: 'Job events of this process not sent to the other processes (best effort), by reason (buffer_full, publish_failed).',
  schedule_jobs_enqueued: "Recurring schedules' ticks whose job this process's ticker inserted.",
  schedule_ticks_missed: "Recurring schedules' ticks this process's ticker found missed and dropped (their missed policy).",
  schedule_ticks_skipped: "Recurring schedules' ticks this process's ticker skipped: the previous tick's job was unfinished (no overlap).",
};

const HISTOGRAM_HELP: Record<HistogramName, string> = {
  claim_wait_seconds: 'From when a job was due to its claim, in seconds (claim latency).',
  completion_latency_seconds: 'From claim to recorded completion, in seconds.',
  claim_query_duration_seconds: 'Duration of the claim statement, in seconds.',
  handler_duration_seconds: "Handlers' run time, in seconds.",
};

function formatLabels(labels: Labels): string {
  const entries = Object.entries(labels);
  if (entries.length === 0) return '';
  return `{${entries.map(([k, v]) => `${k}="${String(v).replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('\n', '\\n')}"`).join(',')}}`;
}

function formatValue(value: number): string {
  return Number.isFinite(value) ? String(value) : value > 0 ? '+Inf' : value < 0 ? '-Inf' : 'NaN';
}
