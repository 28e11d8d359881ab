import { Catch, HttpStatus, NotFoundException, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { DatabaseTimeoutError, DatabaseUnavailableError, InvalidJobError, InvalidOptionError, JobStateError } from '../../lib/index.js';

/** What the filter needs of Express's response (the sample does not depend on @types/express). */
interface JsonResponse {
  status(code: number): { json(body: unknown): void };
}

type QueueError = InvalidJobError | InvalidOptionError | JobStateError | DatabaseUnavailableError | DatabaseTimeoutError;

/**
 * An operator's request that does not fit the job's state. Typed by the error's own code union, so
 * a new code in the queue fails the build here until it is given a status.
 */
const STATE_ERROR_STATUS: Record<JobStateError['code'], HttpStatus> = {
  JOB_NOT_FOUND: HttpStatus.NOT_FOUND,
  QUEUE_NOT_FOUND: HttpStatus.NOT_FOUND,
  JOB_NOT_DEAD: HttpStatus.CONFLICT,
  JOB_NOT_CANCELLABLE: HttpStatus.CONFLICT,
  JOB_NOT_FINISHED: HttpStatus.CONFLICT,
};

const REASON: Partial<Record<HttpStatus, string>> = {
  [HttpStatus.BAD_REQUEST]: 'Bad Request',
  [HttpStatus.NOT_FOUND]: 'Not Found',
  [HttpStatus.CONFLICT]: 'Conflict',
  [HttpStatus.SERVICE_UNAVAILABLE]: 'Service Unavailable',
};

/**
 * The queue's errors as HTTP answers, in one place, so controllers just call `QueueService`:
 *
 * - `InvalidJobError`, `InvalidOptionError` (a bad job, id, cursor or limit) → 400;
 * - `JobStateError` `JOB_NOT_FOUND`, `QUEUE_NOT_FOUND` → 404;
 * - any other `JobStateError` (`JOB_NOT_DEAD`, `JOB_NOT_CANCELLABLE`, `JOB_NOT_FINISHED`) → 409;
 * - `DatabaseUnavailableError` (`DATABASE_UNAVAILABLE`: the database cannot be reached) and
 *   `DatabaseTimeoutError` (`DATABASE_TIMEOUT`: a statement ran out of time, usually on a row a
 *   transaction holds) → 503: the request was fine, try it again later. Without this, every request
 *   during an outage was a 500 with a stack trace in the log.
 *
 * The body carries the error's code and its message, which says what is wrong and what to do:
 * `{ statusCode, error, code, message }`, never a stack.
 */
@Catch(InvalidJobError, InvalidOptionError, JobStateError, DatabaseUnavailableError, DatabaseTimeoutError)
export class PgQueueErrorFilter implements ExceptionFilter {
  catch(error: QueueError, host: ArgumentsHost): void {
    const status =
      error instanceof JobStateError
        ? STATE_ERROR_STATUS[error.code]
        : error instanceof DatabaseUnavailableError || error instanceof DatabaseTimeoutError
          ? HttpStatus.SERVICE_UNAVAILABLE
          : HttpStatus.BAD_REQUEST;
    host
      .switchToHttp()
      .getResponse<JsonResponse>()
      .status(status)
      .json({ statusCode: status, error: REASON[status], code: error.code, message: error.message });
  }
}

/** A 404 in the same shape, for a job the queue has no record of. */
export function jobNotFound(id: string): NotFoundException {
  return new NotFoundException({
    statusCode: HttpStatus.NOT_FOUND,
    error: REASON[HttpStatus.NOT_FOUND],
    code: 'JOB_NOT_FOUND',
    message: `No job with id ${JSON.stringify(id.slice(0, 40))}.`,
  });
}
