import { Body, Controller, Get, Param, Post } from '@nestjs/common';
import { QueueService } from '../../lib/index.js';
import { FakePaymentGateway } from '../fake-payment-gateway.js';
import { ReportJobs } from '../jobs/reports.jobs.js';
import { parseEnqueueRequest } from './enqueue-request.js';
import { jobNotFound } from './job-not-found.js';

@Controller()
export class JobsController {
  constructor(
    private readonly queue: QueueService,
    private readonly reports: ReportJobs,
    private readonly gateway: FakePaymentGateway,
  ) {}

  /** `{ queue, payload, options? }` → `{ id }`; 400 with the queue's message for bad input. */
  @Post('jobs')
  async enqueue(@Body() body: unknown): Promise<{ id: string }> {
    const { queue, payload, options } = parseEnqueueRequest(body);
    return { id: await this.queue.enqueue(queue, payload, options) };
  }

  /** The job's state, attempts, last error and history (the payload is not echoed back). */
  @Get('jobs/:id')
  async get(@Param('id') id: string) {
    const job = await this.queue.get(id);
    if (!job) throw jobNotFound(id);
    const history = await this.queue.history(id);
    return {
      id: job.id,
      queue: job.queue,
      state: job.status,
      attempts: job.attemptCount,
      maxAttempts: job.maxAttempts,
      lastError: job.lastErrorCode ? { code: job.lastErrorCode, message: job.lastErrorMessage } : null,
      progress: this.reports.progress.get(job.id) ?? null,
      createdAt: job.createdAt,
      finishedAt: job.finishedAt,
      history: history.map((e) => ({ at: e.at, kind: e.kind, from: e.fromStatus, to: e.toStatus, attempt: e.attempt, errorCode: e.errorCode })),
    };
  }

  /** The fake payment provider's effects: one charge per idempotency key, however many retries. */
  @Get('payments/charges')
  charges() {
    return this.gateway.charges();
  }
}
