import { Logger } from '@nestjs/common';
import type { EngineLogger } from '../engine/index.js';
import { PG_QUEUE_LOGGER_CONTEXT } from '../pg-queue.constants.js';

/** The longest line the module hands to Nest's logger; engine messages never carry payloads. */
const MAX_LINE = 2_000;

/**
 * The engine's logger, written through Nest's `Logger` with the context "PgQueue", so queue lines
 * follow the application's logger (its levels, its format, `app.useLogger()`).
 */
export class NestEngineLogger implements EngineLogger {
  private readonly logger = new Logger(PG_QUEUE_LOGGER_CONTEXT);

  log(message: string): void {
    this.logger.log(bounded(message));
  }

  warn(message: string): void {
    this.logger.warn(bounded(message));
  }

  error(message: string): void {
    this.logger.error(bounded(message));
  }
}

function bounded(message: string): string {
  return message.length > MAX_LINE ? `${message.slice(0, MAX_LINE)}… (${message.length - MAX_LINE} more characters)` : message;
}
