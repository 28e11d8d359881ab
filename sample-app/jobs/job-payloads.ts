/**
 * Queue names and payload types, shared by producers (`queue.enqueue<ChargeCustomer>(…)`) and
 * handlers (`job: Job<ChargeCustomer>`): one type, so both sides agree at compile time.
 */
export const QUEUES = {
  payments: 'payments',
  reports: 'reports',
  webhooks: 'webhooks',
  imports: 'imports',
} as const;

export type QueueName = (typeof QUEUES)[keyof typeof QUEUES];

/** (a) An external side effect made idempotent with `job.idempotencyKey`. */
export interface ChargeCustomer {
  customerId: string;
  amountCents: number;
  /** Demo switch: the gateway applies the first charge, then "times out" before answering. */
  simulateLostResponse?: boolean;
}

/** (b) A long job that reports progress and honours its abort signal. */
export interface GenerateReport {
  reportId: string;
  pages: number;
  msPerPage: number;
}

/** (c) A delivery that fails transiently, then succeeds. */
export interface DeliverWebhook {
  url: string;
  event: string;
  /** Demo switch: the receiver answers 503 this many times first. */
  failuresBeforeSuccess?: number;
}

/** (d) A job that can never succeed: an unsupported payload version. */
export interface ImportCatalog {
  version: number;
  source: string;
}
