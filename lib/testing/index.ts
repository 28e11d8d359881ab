// The test kit: `import { createTestDatabase, runJob, drainQueues } from 'nestjs-pg-queue/testing'`.
export { drainQueues, DrainQueuesError, DRAIN_TIMEOUT_DEFAULT_MS, type DrainQueuesOptions, type ProviderSource } from './drain-queues.js';
export { runJob, RunJobError, FINAL_JOB_STATUSES, type RunJobOptions } from './run-job.js';
export {
  createTestDatabase,
  startTestDatabaseServer,
  urlForDatabase,
  TestDatabaseError,
  type CreateTestDatabaseOptions,
  type TestDatabase,
} from './test-database.js';
