import type { LoggerService } from '@nestjs/common';

export interface LogLine {
  readonly level: 'log' | 'warn' | 'error' | 'debug' | 'verbose' | 'fatal';
  readonly message: string;
  readonly context: string | undefined;
}

/**
 * A Nest logger for tests: keeps every line (so a test can assert on warnings) and prints nothing
 * unless PGQ_TEST_LOGS is set.
 */
export class CapturingLogger implements LoggerService {
  readonly lines: LogLine[] = [];

  log(message: unknown, context?: string): void {
    this.add('log', message, context);
  }
  warn(message: unknown, context?: string): void {
    this.add('warn', message, context);
  }
  error(message: unknown, ...rest: unknown[]): void {
    this.add('error', message, rest.at(-1) as string | undefined);
  }
  debug(message: unknown, context?: string): void {
    this.add('debug', message, context);
  }
  verbose(message: unknown, context?: string): void {
    this.add('verbose', message, context);
  }
  fatal(message: unknown, context?: string): void {
    this.add('fatal', message, context);
  }

  /** Lines of a level (and context), as text. */
  messages(level: LogLine['level'], context?: string): string[] {
    return this.lines.filter((l) => l.level === level && (context === undefined || l.context === context)).map((l) => l.message);
  }

  private add(level: LogLine['level'], message: unknown, context: string | undefined): void {
    const text = message instanceof Error ? message.message : String(message);
    this.lines.push({ level, message: text, context });
    if (process.env.PGQ_TEST_LOGS) process.stderr.write(`[${level}] [${context ?? ''}] ${text}\n`);
  }
}
