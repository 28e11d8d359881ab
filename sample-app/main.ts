import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';

const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) {
  process.stderr.write('DATABASE_URL is not set. Run `npm start` (it starts a throwaway PostgreSQL when DATABASE_URL is unset) or set it.\n');
  process.exit(1);
}
const port = Number(process.env.PORT ?? 3000);

const app = await NestFactory.create(AppModule.register({ connectionString: databaseUrl }));
// SIGTERM/SIGINT → beforeApplicationShutdown: the queue stops claiming, drains running handlers
// (10 s by default), releases what is left, and closes its pool. useProcessExit: exit 0 after a
// clean shutdown (by default Nest re-raises the signal, and the process ends "killed by SIGTERM").
app.enableShutdownHooks(['SIGTERM', 'SIGINT'], { useProcessExit: true });
await app.listen(port);

const base = (await app.getUrl()).replace('[::1]', 'localhost').replace('127.0.0.1', 'localhost');
const post = (body: object) => `curl -s -X POST ${base}/jobs -H 'content-type: application/json' -d '${JSON.stringify(body)}'`;
process.stdout.write(
  [
    '',
    `Sample app on ${base}`,
    `  dashboard: ${base}/pg-queue        (sign in with any name: a development stand-in for authentication)`,
    `  health:   curl -s ${base}/health          (503 when a queue's oldest claimable job waits too long)`,
    `  metrics:  curl -s ${base}/metrics         (Prometheus text)`,
    `  stats:    curl -s ${base}/stats`,
    `  a job:    curl -s ${base}/jobs/<id>        (and /jobs/<id>/history)`,
    `  charges:  curl -s ${base}/payments/charges`,
    '',
    'Operate it (what an admin UI calls):',
    `  dead jobs:      curl -s '${base}/dead?queue=imports&errorCode=UNSUPPORTED_VERSION'   (paged: &cursor=<nextCursor>)`,
    `  replay one:     curl -s -X POST ${base}/jobs/<id>/replay -H 'content-type: application/json' -H 'x-actor: you' -d '{"reason":"fixed the importer"}'`,
    `  cancel one:     curl -s -X POST ${base}/jobs/<id>/cancel`,
    `  pause, resume:  curl -s -X POST ${base}/queues/reports/pause ; curl -s -X POST ${base}/queues/reports/resume`,
    '',
    'Enqueue one of each example (each prints { "id": … }):',
    `  (a) idempotent charge, first response lost:  ${post({ queue: 'payments', payload: { customerId: 'c1', amountCents: 1299, simulateLostResponse: true } })}`,
    `  (b) long report with heartbeats:            ${post({ queue: 'reports', payload: { reportId: 'r1', pages: 10, msPerPage: 500 } })}`,
    `  (c) webhook, two 503s then success:          ${post({ queue: 'webhooks', payload: { url: 'https://example.test/hook', event: 'paid', failuresBeforeSuccess: 2 } })}`,
    `  (d) import, unsupported version (dead):      ${post({ queue: 'imports', payload: { version: 1, source: 's3://bucket/catalog.csv' } })}`,
    `  bad input (400):                             ${post({ queue: 'payments', payload: {}, options: { delayMs: -1 } })}`,
    '',
    'Ctrl-C stops it gracefully (running jobs finish or are released).',
    '',
  ].join('\n'),
);
