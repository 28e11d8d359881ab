import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../scripts/embedded-postgres.mjs';

// These start real PostgreSQL processes (a cold start is 1-2 s, slower on a busy machine).
const TIMEOUT = 120_000;
const modulePath = fileURLToPath(new URL('../scripts/embedded-postgres.mjs', import.meta.url));

async function query(url: string, sql: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Resolves with the connection error, or null if the server accepted the connection. */
async function connectError(port: number): Promise<NodeJS.ErrnoException | null> {
  const client = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', database: 'postgres', connectionTimeoutMillis: 2_000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.end();
    return null;
  } catch (error) {
    return error as NodeJS.ErrnoException;
  }
}

async function waitFor(what: string, condition: () => Promise<boolean> | boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

describe('startEmbeddedPostgres', () => {
  const started: EmbeddedPostgres[] = [];
  afterEach(async () => {
    await Promise.all(started.splice(0).map((server) => server.stop()));
  });

  it('starts a PostgreSQL 15.18 that answers queries, and stop() removes it', { timeout: TIMEOUT }, async () => {
    const server = await startEmbeddedPostgres();
    started.push(server);

    expect(server.url).toBe(`postgres://postgres@127.0.0.1:${server.port}/postgres`);
    expect(server.port).not.toBe(5432);
    const { rows } = await query(server.url, 'SELECT version() AS version');
    expect(rows[0].version).toMatch(/^PostgreSQL 15\.18\b/);
    const settings = await query(server.url, "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'max_connections', 'listen_addresses')");
    expect(Object.fromEntries(settings.rows.map((row) => [row.name, row.setting]))).toEqual({
      fsync: 'off',
      max_connections: '200',
      listen_addresses: '127.0.0.1',
    });

    await server.stop();
    expect(existsSync(server.dataDir)).toBe(false);
    expect(isAlive(server.pid)).toBe(false);
    expect((await connectError(server.port))?.code).toBe('ECONNREFUSED');
  });

  it('runs two instances at once on different ports', { timeout: TIMEOUT }, async () => {
    const [a, b] = await Promise.all([startEmbeddedPostgres(), startEmbeddedPostgres()]);
    started.push(a, b);

    expect(a.port).not.toBe(b.port);
    expect(a.dataDir).not.toBe(b.dataDir);
    await query(a.url, 'CREATE TABLE only_in_a (id int)');
    const inB = await query(b.url, "SELECT to_regclass('only_in_a') AS t");
    expect(inB.rows[0].t).toBeNull();
  });

  it('reports the server log when postgres fails to start, and leaves nothing behind', { timeout: TIMEOUT }, async () => {
    // A scratch TMPDIR of its own (traversable by the unprivileged user postgres runs as under root),
    // so that "nothing behind" can be checked while other files start servers too.
    const scratch = await mkdtemp(join(tmpdir(), 'embedded-postgres-spec-'));
    await chmod(scratch, 0o755);
    const savedTmpdir = process.env.TMPDIR;
    process.env.TMPDIR = scratch;
    try {
      await expect(startEmbeddedPostgres({ serverOptions: { shared_buffers: 'plenty' } })).rejects.toThrow(
        /exited during startup[\s\S]*invalid value for parameter "shared_buffers"/,
      );
      await waitFor('the temp dir to be deleted', async () => (await readdir(scratch)).length === 0);
    } finally {
      if (savedTmpdir === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = savedTmpdir;
      await rm(scratch, { recursive: true, force: true });
    }
  });

  it('stops the server and deletes its data when the parent process is SIGKILLed', { timeout: TIMEOUT }, async () => {
    const parent = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const { startEmbeddedPostgres } = await import(${JSON.stringify(modulePath)});
         const server = await startEmbeddedPostgres();
         console.log(JSON.stringify({ port: server.port, dataDir: server.dataDir, pid: server.pid }));
         setInterval(() => {}, 60_000);`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const exited = new Promise((resolve) => parent.once('exit', resolve));
    try {
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: parent.stdout }).once('line', resolve);
        parent.once('exit', (code) => reject(new Error(`parent exited (${code}) before printing its server`)));
      });
      const server = JSON.parse(line) as { port: number; dataDir: string; pid: number };
      expect(await connectError(server.port)).toBeNull();
      expect(existsSync(server.dataDir)).toBe(true);

      parent.kill('SIGKILL');
      await exited;

      await waitFor('the server to refuse connections', async () => (await connectError(server.port))?.code === 'ECONNREFUSED');
      await waitFor('the data dir to be deleted', () => !existsSync(server.dataDir));
      // The postmaster may linger as a zombie if nothing reaps it; it must not be serving.
      expect(await connectError(server.port)).not.toBeNull();
    } finally {
      if (parent.exitCode === null && parent.signalCode === null) {
        parent.kill('SIGKILL');
        await exited;
      }
    }
  });
});
