import { Injectable, Logger } from '@nestjs/common';
import { JobHandler, RetryableJobError, type Job, type JobContext } from '../../lib/index.js';
import { FakePaymentGateway, GatewayTimeoutError } from '../fake-payment-gateway.js';
import { QUEUES, type ChargeCustomer } from './job-payloads.js';

/**
 * (a) A side effect in another system. A job can run more than once (a retry after a timeout, a
 * lease lost mid-call, a crash after the charge but before the completion was written), so every
 * external call carries `job.idempotencyKey`: the same key on every attempt and replay of the
 * job, and the provider deduplicates on it.
 */
@Injectable()
export class PaymentJobs {
  private readonly logger = new Logger(PaymentJobs.name);

  constructor(private readonly gateway: FakePaymentGateway) {}

  @JobHandler(QUEUES.payments, { concurrency: 5, maxAttempts: 5, backoff: { baseMs: 100, maxMs: 2_000 } })
  async charge(job: Job<ChargeCustomer>, ctx: JobContext): Promise<void> {
    const { customerId, amountCents, simulateLostResponse } = job.payload;
    try {
      const charge = await this.gateway.charge(
        // Simulate the lost response on the first attempt only, as a flaky network would.
        { idempotencyKey: job.idempotencyKey, customerId, amountCents, simulateLostResponse: simulateLostResponse && job.attempt === 1 },
        ctx.signal,
      );
      this.logger.log(`Job ${job.id}: charge ${charge.chargeId} (attempt ${job.attempt}).`);
    } catch (error) {
      if (error instanceof GatewayTimeoutError) {
        // We cannot know whether the charge happened: retrying is safe only because of the key.
        throw new RetryableJobError('the payment gateway timed out', { code: 'GATEWAY_TIMEOUT', retryAfterMs: 100, cause: error });
      }
      throw error;
    }
  }
}
