// The test kit: `import { drainQueues } from 'nestjs-pg-queue/testing'`.
export { drainQueues, DrainQueuesError, DRAIN_TIMEOUT_DEFAULT_MS, type DrainQueuesOptions, type ProviderSource } from './drain-queues.js';
