import type { EngineStats, PgQueue } from './pg-queue.js';

export interface HealthThresholds {
  /** Unhealthy when a queue's oldest claimable job has waited longer than this (default 5 min). */
  maxClaimableAgeMs?: number;
  /**
   * Unhealthy when the LISTEN connection has been down longer than this (default 1 min); a
   * connection that does not hear its probe NOTIFY counts as down.
   */
  maxListenerDownMs?: number;
  /**
   * Unhealthy when an active recurring schedule has had a tick due, and not handled, for longer
   * than this (default 1 min): no process runs its ticker (docs/recurring-jobs.md).
   */
  maxScheduleLateMs?: number;
}

export interface HealthReport {
  healthy: boolean;
  /** One sentence per problem, naming the queue and the figure. */
  problems: string[];
  stats: EngineStats;
}

export const HEALTH_DEFAULTS = { maxClaimableAgeMs: 5 * 60_000, maxListenerDownMs: 60_000, maxScheduleLateMs: 60_000 } as const;

/**
 * Health by age, as the reference asks: a small queue can still be broken if its oldest job has
 * not moved. Paused queues are exempt from the age check (their age is expected to grow).
 * Usable as it is, or from a @nestjs/terminus indicator.
 */
export async function checkHealth(queue: PgQueue, thresholds: HealthThresholds = {}): Promise<HealthReport> {
  const maxClaimableAgeMs = thresholds.maxClaimableAgeMs ?? HEALTH_DEFAULTS.maxClaimableAgeMs;
  const maxListenerDownMs = thresholds.maxListenerDownMs ?? HEALTH_DEFAULTS.maxListenerDownMs;
  const maxScheduleLateMs = thresholds.maxScheduleLateMs ?? HEALTH_DEFAULTS.maxScheduleLateMs;
  const stats = await queue.stats();
  const problems: string[] = [];
  for (const q of stats.queues) {
    if (!q.paused && q.oldestClaimableAgeMs !== null && q.oldestClaimableAgeMs > maxClaimableAgeMs) {
      problems.push(`queue "${q.queue}": the oldest claimable job has waited ${Math.round(q.oldestClaimableAgeMs / 1_000)} s (limit ${maxClaimableAgeMs / 1_000} s)`);
    }
  }
  // stats() lists the most late schedules (those over a second late, the latest first): the ones
  // over the limit are among them whenever any is.
  for (const late of stats.schedules.late) {
    if (late.lateMs > maxScheduleLateMs) {
      problems.push(`schedule "${late.name}" (queue "${late.queue}"): its tick of ${late.nextTickAt.toISOString()} is ${Math.round(late.lateMs / 1_000)} s late (limit ${maxScheduleLateMs / 1_000} s); no process is running its ticks`);
    }
  }
  if (stats.listener.downForMs > maxListenerDownMs) {
    problems.push(`the LISTEN connection has been down for ${Math.round(stats.listener.downForMs / 1_000)} s (limit ${maxListenerDownMs / 1_000} s); workers only poll meanwhile`);
  }
  return { healthy: problems.length === 0, problems, stats };
}
