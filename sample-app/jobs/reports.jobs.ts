import { Injectable, Logger } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { JobHandler, type Job, type JobContext } from '../../lib/index.js';
import { QUEUES, type GenerateReport } from './job-payloads.js';

/**
 * (b) A long job. Its lease (2 s here) is much shorter than the job, so it must report progress:
 * `ctx.heartbeat()` after each page renews the lease (throttled, never past `maxRuntimeMs`). Without
 * it the lease would expire and another worker could take the job over. It also honours
 * `ctx.signal`, which aborts at shutdown, before a lease could expire, and at the maximum runtime:
 * the handler stops at once instead of working on a job it may no longer own.
 */
@Injectable()
export class ReportJobs {
  private readonly logger = new Logger(ReportJobs.name);
  /** Pages done per job id, for the demo's `GET /jobs/:id`. */
  readonly progress = new Map<string, { page: number; pages: number }>();

  @JobHandler(QUEUES.reports, { concurrency: 2, leaseMs: 2_000, maxRuntimeMs: 120_000, maxAttempts: 3 })
  async generate(job: Job<GenerateReport>, ctx: JobContext): Promise<void> {
    const { reportId, pages, msPerPage } = job.payload;
    for (let page = 1; page <= pages; page++) {
      await renderPage(msPerPage, ctx.signal);
      await ctx.heartbeat();
      this.progress.set(job.id, { page, pages });
    }
    this.logger.log(`Job ${job.id}: report ${reportId} done, ${pages} page(s).`);
  }
}

/** Stands in for real work that accepts a signal (fetch, a database query, a child process). */
async function renderPage(ms: number, signal: AbortSignal): Promise<void> {
  try {
    await sleep(ms, undefined, { signal });
  } catch (error) {
    // Rethrow the signal's reason (a JobAbortedError saying why), not the timer's AbortError.
    signal.throwIfAborted();
    throw error;
  }
}
