import { JobStateError } from '../../lib/index.js';

/** A job the queue has no record of, as the queue's own error: PgQueueExceptionFilter makes it a 404. */
export function jobNotFound(id: string): JobStateError {
  return new JobStateError('JOB_NOT_FOUND', `No job with id ${JSON.stringify(id.slice(0, 40))}.`);
}
