import { Injectable } from '@nestjs/common';
import { JobHandler, PermanentJobError, type Job } from '../../lib/index.js';
import { QUEUES, type ImportCatalog } from './job-payloads.js';

export const SUPPORTED_IMPORT_VERSION = 2;

/**
 * (d) A permanent failure: no retry can fix an unsupported payload version. `PermanentJobError`
 * makes the job dead at once, with its code; dead jobs are kept for inspection and replay.
 */
@Injectable()
export class ImportJobs {
  @JobHandler(QUEUES.imports, { concurrency: 2, maxAttempts: 5 })
  async import(job: Job<ImportCatalog>): Promise<void> {
    if (job.payload.version !== SUPPORTED_IMPORT_VERSION) {
      throw new PermanentJobError(`payload version ${String(job.payload.version).slice(0, 20)} is not supported (expected ${SUPPORTED_IMPORT_VERSION})`, {
        code: 'UNSUPPORTED_VERSION',
      });
    }
  }
}
