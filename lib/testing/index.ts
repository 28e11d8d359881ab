export { drainQueues, DRAIN_TIMEOUT_DEFAULT_MS, type DrainQueuesOptions, type ProviderSource } from './drain-queues.js';
