import { Inject, Injectable } from '@nestjs/common';
import { checkHealth, DatabaseTimeoutError, DatabaseUnavailableError, PgQueue, type HealthReport } from './engine/index.js';
import type { PgQueueHealthOptions } from './interfaces/index.js';
import { PG_QUEUE_RUNTIME_CONFIG } from './nest/pg-queue.providers.js';
import { resolveHealthOptions, type ModuleRuntimeConfig } from './nest/pg-queue.options.js';
import { HEALTH_KEY_DEFAULT, PG_QUEUE_ENGINE } from './pg-queue.constants.js';
import { HEALTH_FAILED, HEALTH_NO_ANSWER, HEALTH_UNREACHABLE } from './pg-queue.messages.js';

/** What the check found, beside its status. */
export type PgQueueHealthDetails = {
  status: 'up' | 'down';
  /** One sentence per problem, naming the queue and the figure; empty when up. */
  problems: string[];
  /** The longest any unpaused queue's oldest claimable job has waited, in ms (null: nothing waits). */
  oldestClaimableAgeMs: number | null;
  /** The queue that job is in (null: nothing waits). */
  oldestClaimableQueue: string | null;
  /** The most late active recurring schedule (a tick due over a second and not handled), or null. */
  mostLateSchedule: { name: string; queue: string; lateMs: number } | null;
  /** The LISTEN connection (wake-ups), listening once it hears its probe NOTIFY; without it workers only poll. */
  listener: { listening: boolean; downForMs: number } | null;
  /** The thresholds this check applied. */
  limits: Required<PgQueueHealthOptions>;
};

/**
 * The shape of a @nestjs/terminus `HealthIndicatorResult`: `{ [key]: { status, ...details } }`.
 * Declared here so that terminus stays optional: nothing of this library imports it.
 */
export type PgQueueHealthResult<Key extends string = typeof HEALTH_KEY_DEFAULT> = Record<Key, PgQueueHealthDetails>;

/**
 * The queue's health, by age (the reference's rule: alert on how long the oldest claimable job has
 * waited, not on how many there are): down when an unpaused queue's oldest claimable job has waited
 * longer than `maxClaimableAgeMs`, when the LISTEN connection has been down longer than
 * `maxListenerDownMs`, when a recurring schedule's tick has been due longer than `maxScheduleLateMs`, or when the database does not answer within `timeoutMs`. Paused queues are
 * exempt from the age check. Thresholds come from the module's `health` option; a call's
 * arguments override them field by field.
 *
 * With @nestjs/terminus (v11+), return it from a `HealthCheckService.check()` indicator; a
 * `down` result makes terminus answer 503:
 *
 * ```ts
 * @Get('health') @HealthCheck()
 * check() { return this.health.check([() => this.pgQueue.isHealthy()]); }
 * ```
 *
 * Without terminus, call it and map `status` yourself. It never throws for a sick queue or an
 * unreachable database (those are `down`); it throws `InvalidOptionError` for a bad threshold.
 *
 * @publicApi
 */
@Injectable()
export class PgQueueHealthIndicator {
  constructor(
    @Inject(PG_QUEUE_ENGINE) private readonly engine: PgQueue,
    @Inject(PG_QUEUE_RUNTIME_CONFIG) private readonly config: ModuleRuntimeConfig,
  ) {}

  async isHealthy<const Key extends string = typeof HEALTH_KEY_DEFAULT>(
    key: Key = HEALTH_KEY_DEFAULT as Key,
    thresholds?: PgQueueHealthOptions,
  ): Promise<PgQueueHealthResult<Key>> {
    const limits = resolveHealthOptions('thresholds', thresholds, this.config.health);
    const result = (details: Omit<PgQueueHealthDetails, 'limits'>) => ({ [key]: { ...details, limits } }) as PgQueueHealthResult<Key>;
    let report: HealthReport;
    try {
      report = await withTimeout(checkHealth(this.engine, limits), limits.timeoutMs);
    } catch (error) {
      const problem =
        error instanceof HealthTimeout
          ? HEALTH_NO_ANSWER(limits.timeoutMs)
          : error instanceof DatabaseUnavailableError
            ? HEALTH_UNREACHABLE(error.target, error.reason)
            : error instanceof DatabaseTimeoutError
              ? HEALTH_NO_ANSWER(error.timeoutMs)
              : HEALTH_FAILED((error as Error).message);
      return result({ status: 'down', problems: [problem], oldestClaimableAgeMs: null, oldestClaimableQueue: null, mostLateSchedule: null, listener: null });
    }
    let oldest: { queue: string; ageMs: number } | undefined;
    for (const q of report.stats.queues) {
      if (q.paused || q.oldestClaimableAgeMs === null) continue;
      if (!oldest || q.oldestClaimableAgeMs > oldest.ageMs) oldest = { queue: q.queue, ageMs: q.oldestClaimableAgeMs };
    }
    const late = report.stats.schedules.late[0];
    return result({
      status: report.healthy ? 'up' : 'down',
      problems: report.problems,
      oldestClaimableAgeMs: oldest ? Math.round(oldest.ageMs) : null,
      oldestClaimableQueue: oldest?.queue ?? null,
      mostLateSchedule: late ? { name: late.name, queue: late.queue, lateMs: late.lateMs } : null,
      listener: { listening: report.stats.listener.listening, downForMs: report.stats.listener.downForMs },
    });
  }
}

class HealthTimeout extends Error {}

/**
 * The check's own promise goes on after a timeout (a query cannot be taken back); its late
 * failure is swallowed here rather than left unhandled.
 */
function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new HealthTimeout()), ms);
    timer.unref();
  });
  promise.catch(() => {});
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
