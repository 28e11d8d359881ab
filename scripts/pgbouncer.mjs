// A throwaway PgBouncer in front of a PostgreSQL server, for `npm run test:topologies` and
// `npm run bench -- --topology pgbouncer-…`:
//
//   const bouncer = await startPgBouncer({ upstream: 'postgres://postgres@127.0.0.1:5433/postgres', poolMode: 'transaction' });
//   bouncer.via(databaseUrl)   // the same database, through the bouncer
//   await bouncer.stop();
//
//   node scripts/pgbouncer.mjs --check   # exit 1 with one line when pgbouncer is not installed
//
// - The binary: $PGBOUNCER_BIN, else `pgbouncer` on PATH, else /usr/sbin/pgbouncer (Debian's package).
// - A config of its own in a fresh temp dir: 127.0.0.1 and a free port, no unix socket, `auth_type =
//   trust` (with an auth file naming the upstream's user, as trust still requires), one wildcard
//   database entry (every database name goes to the upstream server under the same name), the given
//   pool_mode. The pool sizes are generous (see SETTINGS): a session pool smaller than the clients
//   makes clients wait, which is not what is measured here.
// - As root it runs as the unprivileged OS user embedded-postgres.mjs uses (pgbouncer refuses root).
// - A /bin/sh watchdog shares a pipe with this process, as in embedded-postgres.mjs: when this
//   process dies, even by SIGKILL, the watchdog reads EOF, stops pgbouncer and deletes the temp dir.
//
// Plain JS on purpose: it runs under plain node (the bench) and inside vitest.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { chownTree, ensureOsUser, freePort, logTail, once, stopWatched } from './embedded-postgres.mjs';

export const POOL_MODES = ['session', 'transaction'];

/** One line: what is missing and how to get it. */
export const PGBOUNCER_MISSING =
  'pgbouncer is not installed: install the Debian/Ubuntu package `pgbouncer` (apt-get install pgbouncer), or set PGBOUNCER_BIN to its binary';

/**
 * Besides the listen address, auth and pool_mode. No `ignore_startup_parameters`: node-postgres
 * sends only user, database and application_name (which PgBouncer knows), so the engine needs none.
 */
const SETTINGS = {
  max_client_conn: 1000,
  default_pool_size: 50,
  // Not PgBouncer's default (120 s): a test that exhausts the pool should fail soon and say so.
  query_wait_timeout: 30,
};

// `sh -c WATCHDOG sh <root> <pgbouncer> <ini>` with our pipe on fd 3; pgbouncer is exec'ed, so $$ is
// its pid. On "release" (stop() saw pgbouncer exit) the watchdog exits; on EOF it sends SIGTERM
// (immediate shutdown) while $$ is still a live pgbouncer, SIGKILL after 5 s, then deletes the
// temp dir. "Live": an orphaned pgbouncer can stay a zombie under an init that does not reap.
const WATCHDOG = `
root=$1; shift
alive() { s=$(ps -p $$ -o stat= 2>/dev/null) && [ -n "$s" ] && [ "\${s#Z}" = "$s" ] && ps -p $$ -o comm= | grep -q pgbouncer; }
(
  while read -r line <&3; do
    [ "$line" = release ] && exit 0
  done
  alive && kill -TERM $$ 2>/dev/null
  i=0
  while alive; do
    i=$((i + 1))
    [ $i -eq 50 ] && kill -KILL $$ 2>/dev/null
    [ $i -ge 60 ] && break
    sleep 0.1
  done
  rm -rf "$root"
) >/dev/null 2>&1 &
exec "$@" 3<&-
`;

/** The pgbouncer binary, or an Error whose message is PGBOUNCER_MISSING. */
export function locatePgBouncer() {
  const candidates = process.env.PGBOUNCER_BIN ? [process.env.PGBOUNCER_BIN] : [...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean).map((dir) => path.join(dir, 'pgbouncer')), '/usr/sbin/pgbouncer'];
  for (const file of candidates) {
    try {
      fs.accessSync(file, fs.constants.X_OK);
      return file;
    } catch {
      // next
    }
  }
  const message = process.env.PGBOUNCER_BIN ? `PGBOUNCER_BIN=${process.env.PGBOUNCER_BIN} is not an executable; unset it to use the Debian/Ubuntu package \`pgbouncer\` (apt-get install pgbouncer)` : PGBOUNCER_MISSING;
  throw Object.assign(new Error(message), { code: 'PGBOUNCER_MISSING' });
}

/** `pgbouncer --version`'s first line ("PgBouncer 1.18.0"). */
export function pgBouncerVersion(binary = locatePgBouncer()) {
  const result = spawnSync(binary, ['--version'], { encoding: 'utf8' });
  return (result.stdout || result.stderr || '').split('\n')[0].trim();
}

/**
 * @param {{ upstream: string, poolMode?: 'session' | 'transaction', settings?: Record<string, string | number>, startTimeoutMs?: number }} options
 */
export async function startPgBouncer(options) {
  const binary = locatePgBouncer();
  const poolMode = options.poolMode ?? 'transaction';
  if (!POOL_MODES.includes(poolMode)) throw new Error(`poolMode must be one of ${POOL_MODES.join(', ')}, not ${poolMode}`);
  // From 1.21 PgBouncer can track protocol-level named statements (max_prepared_statements; on
  // by default from 1.22). Untested here (docs/deployment.md): off, so that a newer PgBouncer
  // behaves as the documented one does.
  const [major = 0, minor = 0] = (/(\d+)\.(\d+)/.exec(pgBouncerVersion(binary)) ?? []).slice(1).map(Number);
  const versionSettings = major > 1 || (major === 1 && minor >= 21) ? { max_prepared_statements: 0 } : {};
  const upstream = new URL(options.upstream);
  const user = decodeURIComponent(upstream.username || 'postgres');
  const startTimeoutMs = options.startTimeoutMs ?? 10_000;
  const osUser = process.getuid?.() === 0 ? ensureOsUser() : undefined;

  const root = await fsp.mkdtemp(path.join(os.tmpdir(), 'pgqueue-pgbouncer-'));
  const ini = path.join(root, 'pgbouncer.ini');
  const authFile = path.join(root, 'userlist.txt');
  const logFile = path.join(root, 'pgbouncer.log');
  try {
    await fsp.writeFile(authFile, `"${user.replace(/"/g, '""')}" ""\n`);
    for (let attempt = 1; ; attempt++) {
      const port = await freePort();
      const settings = {
        listen_addr: '127.0.0.1',
        listen_port: port,
        unix_socket_dir: '',
        auth_type: 'trust',
        auth_file: authFile,
        admin_users: user,
        pool_mode: poolMode,
        pidfile: path.join(root, 'pgbouncer.pid'),
        ...SETTINGS,
        ...versionSettings,
        ...options.settings,
      };
      const host = upstream.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1';
      await fsp.writeFile(
        ini,
        [
          '[databases]',
          `* = host=${host} port=${upstream.port || 5432}`,
          '[pgbouncer]',
          ...Object.entries(settings).map(([key, value]) => `${key} = ${value}`),
          '',
        ].join('\n'),
      );
      if (osUser) await chownTree(root, osUser);
      const logFd = fs.openSync(logFile, 'a');
      const child = spawn('/bin/sh', ['-c', WATCHDOG, 'sh', root, binary, ini], {
        cwd: root,
        stdio: ['ignore', logFd, logFd, 'pipe'],
        detached: true, // own process group: a Ctrl-C in the terminal does not reach it
        ...(osUser ? { uid: osUser.uid, gid: osUser.gid } : {}),
      });
      fs.closeSync(logFd);
      const watchdog = /** @type {import('node:net').Socket} */ (child.stdio[3]);
      watchdog.on('error', () => {});
      const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
      child.once('error', () => {});

      const outcome = await waitUntilReady(port, user, authFile, exited, startTimeoutMs);
      if (outcome === 'ready') {
        child.unref();
        watchdog.unref();
        const url = `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/${upstream.pathname.slice(1) || 'postgres'}`;
        return {
          url,
          port,
          poolMode,
          logFile,
          pid: /** @type {number} */ (child.pid),
          /** `databaseUrl` (a database of the upstream server) as reached through this bouncer. */
          via(databaseUrl) {
            const through = new URL(databaseUrl);
            through.hostname = '127.0.0.1';
            through.port = String(port);
            return through.toString();
          },
          stop: once(() => stopBouncer(child, watchdog, exited, root)),
        };
      }
      const log = await logTail(logFile, 30, '(no pgbouncer log)');
      if (outcome === 'timeout') {
        await stopBouncer(child, watchdog, exited, root);
        throw new Error(`pgbouncer did not accept connections within ${startTimeoutMs} ms.\n--- pgbouncer log (tail) ---\n${log}`);
      }
      watchdog.end('release\n', () => watchdog.destroy());
      watchdog.unref();
      if (/Address already in use/i.test(log) && attempt < 5) continue;
      throw new Error(`pgbouncer exited during startup (${outcome.signal ?? `code ${outcome.code}`}).\n--- pgbouncer log (tail) ---\n${log}`);
    }
  } catch (error) {
    await fsp.rm(root, { recursive: true, force: true }).catch(() => {});
    throw error;
  }
}

/** Until the admin console on `port` answers and is ours (its auth_file is the one we wrote). */
async function waitUntilReady(port, user, authFile, exited, timeoutMs) {
  let exit;
  exited.then((value) => (exit = value));
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (exit) return exit;
    const client = new pg.Client({ host: '127.0.0.1', port, user, database: 'pgbouncer', connectionTimeoutMillis: 2_000 });
    client.on('error', () => {});
    try {
      await client.connect();
      const { rows } = await client.query('SHOW CONFIG');
      if (rows.some((row) => row.key === 'auth_file' && row.value === authFile)) return 'ready';
    } catch {
      // not up yet
    } finally {
      await client.end().catch(() => {});
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return exit ?? 'timeout';
}

function stopBouncer(child, watchdog, exited, root) {
  return stopWatched(child, watchdog, exited, root, [
    ['SIGTERM', 5_000],
    ['SIGKILL', 5_000],
  ]);
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href && process.argv.includes('--check')) {
  try {
    locatePgBouncer();
  } catch (error) {
    process.stderr.write(`${/** @type {Error} */ (error).message}\n`);
    process.exit(1);
  }
}
