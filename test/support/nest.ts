import type { INestApplicationContext, LoggerService } from '@nestjs/common';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { createTestDatabase, type TestDatabase } from './database.js';

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

/**
 * The setup every Nest suite repeats: a database of the suite's own (created before its tests,
 * dropped after), and the applications its tests open, each closed when its test ends.
 * `suite.url` is the database; `suite.opened(app)` keeps an app to close.
 */
export function nestSuite(label: string) {
  let database: TestDatabase | undefined;
  const apps: INestApplicationContext[] = [];
  beforeAll(async () => {
    database = await createTestDatabase(label);
  });
  afterEach(async () => {
    for (const app of apps.splice(0)) await app.close();
  });
  afterAll(async () => {
    await database?.drop();
  });
  return {
    get url(): string {
      if (!database) throw new Error(`nestSuite(${label}): the database exists only inside the suite's tests`);
      return database.url;
    },
    opened<T extends INestApplicationContext>(app: T): T {
      apps.push(app);
      return app;
    },
  };
}
