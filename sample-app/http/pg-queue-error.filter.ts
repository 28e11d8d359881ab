import { Catch, HttpStatus, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { InvalidJobError, InvalidOptionError } from '../../lib/index.js';

/**
 * The queue validates every job before writing it; its errors are the client's fault, so they
 * become 400 with the error's own message (it says what is wrong and how to fix it) and code.
 */
/** What the filter needs of Express's response (the sample does not depend on @types/express). */
interface JsonResponse {
  status(code: number): { json(body: unknown): void };
}

@Catch(InvalidJobError, InvalidOptionError)
export class PgQueueErrorFilter implements ExceptionFilter {
  catch(error: InvalidJobError | InvalidOptionError, host: ArgumentsHost): void {
    host
      .switchToHttp()
      .getResponse<JsonResponse>()
      .status(HttpStatus.BAD_REQUEST)
      .json({ statusCode: HttpStatus.BAD_REQUEST, error: 'Bad Request', code: error.code, message: error.message });
  }
}
