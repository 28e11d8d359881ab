import { Catch, HttpStatus, Optional, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { DatabaseConnectionError, DatabaseTimeoutError, DatabaseUnavailableError, EngineStoppedError, InvalidJobError, InvalidOptionError, JobStateError } from './engine/index.js';

/** The errors the filter answers. */
export type PgQueueHttpError = InvalidJobError | InvalidOptionError | JobStateError | DatabaseUnavailableError | DatabaseTimeoutError | DatabaseConnectionError | EngineStoppedError;

/** The body of an answer: the error's code and its message (what is wrong and what to do), never a stack. */
export interface PgQueueErrorBody {
  statusCode: number;
  error: string;
  code: string;
  message: string;
}

/**
 * A request that does not fit the job's state. Typed by the error's own code union, so a new code
 * fails the build here until it is given a status.
 */
const STATE_ERROR_STATUS: Record<JobStateError['code'], HttpStatus> = {
  JOB_NOT_FOUND: HttpStatus.NOT_FOUND,
  QUEUE_NOT_FOUND: HttpStatus.NOT_FOUND,
  JOB_NOT_DEAD: HttpStatus.CONFLICT,
  JOB_NOT_CANCELLABLE: HttpStatus.CONFLICT,
  JOB_NOT_FINISHED: HttpStatus.CONFLICT,
  SCHEDULE_NOT_FOUND: HttpStatus.NOT_FOUND,
  SCHEDULE_OWNED_BY_CODE: HttpStatus.CONFLICT,
};

const REASON: Partial<Record<HttpStatus, string>> = {
  [HttpStatus.BAD_REQUEST]: 'Bad Request',
  [HttpStatus.NOT_FOUND]: 'Not Found',
  [HttpStatus.CONFLICT]: 'Conflict',
  [HttpStatus.SERVICE_UNAVAILABLE]: 'Service Unavailable',
};

/** The HTTP status of one of the queue's errors. */
export function pgQueueErrorStatus(error: PgQueueHttpError): HttpStatus {
  if (error instanceof JobStateError) return STATE_ERROR_STATUS[error.code];
  if (error instanceof DatabaseUnavailableError || error instanceof DatabaseTimeoutError || error instanceof DatabaseConnectionError || error instanceof EngineStoppedError) {
    return HttpStatus.SERVICE_UNAVAILABLE;
  }
  return HttpStatus.BAD_REQUEST;
}

/** What the filter needs of a response when no HTTP adapter is at hand: Express's and Fastify's replies both have it. */
interface StatusReply {
  status(code: number): { send(body: unknown): unknown };
}

/**
 * The queue's errors as HTTP answers, so controllers just call `QueueService` or a `Queue`:
 *
 * - `InvalidJobError`, `InvalidOptionError` (a bad job, payload, id, cursor or limit) → 400;
 * - `JobStateError` `JOB_NOT_FOUND`, `QUEUE_NOT_FOUND`, `SCHEDULE_NOT_FOUND` → 404;
 * - any other `JobStateError` (`JOB_NOT_DEAD`, `JOB_NOT_CANCELLABLE`, `JOB_NOT_FINISHED`, `SCHEDULE_OWNED_BY_CODE`) → 409;
 * - `DatabaseUnavailableError`, `DatabaseTimeoutError`, `DatabaseConnectionError` (the database
 *   refuses this app's credentials, database or TLS settings), `EngineStoppedError` (a request
 *   during shutdown) → 503: the request was fine, the service cannot serve it now.
 *
 * Without it each is a bare 500. Bind it for the app (`{ provide: APP_FILTER, useClass:
 * PgQueueExceptionFilter }` in a module's providers, or `app.useGlobalFilters(new
 * PgQueueExceptionFilter(app.get(HttpAdapterHost)))`), a controller or a route
 * (`@UseFilters(PgQueueExceptionFilter)`). It answers through the app's HTTP adapter (Express or
 * Fastify). Outside HTTP (a microservice, a gateway, a handler) it rethrows the error unchanged.
 *
 * @publicApi
 */
@Catch(InvalidJobError, InvalidOptionError, JobStateError, DatabaseUnavailableError, DatabaseTimeoutError, DatabaseConnectionError, EngineStoppedError)
export class PgQueueExceptionFilter implements ExceptionFilter<PgQueueHttpError> {
  constructor(@Optional() private readonly adapterHost?: HttpAdapterHost) {}

  catch(error: PgQueueHttpError, host: ArgumentsHost): void {
    if (host.getType() !== 'http') throw error;
    const status = pgQueueErrorStatus(error);
    const body: PgQueueErrorBody = { statusCode: status, error: REASON[status] ?? 'Error', code: error.code, message: error.message };
    const response: unknown = host.switchToHttp().getResponse();
    const adapter = this.adapterHost?.httpAdapter;
    if (adapter) adapter.reply(response, body, status);
    else (response as StatusReply).status(status).send(body);
  }
}
