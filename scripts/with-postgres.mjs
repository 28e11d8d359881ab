#!/usr/bin/env node
// Usage: node scripts/with-postgres.mjs [--pg-major <N|newest>] <command> [args...]
//
// Runs <command> with DATABASE_URL pointing at a PostgreSQL server:
// - DATABASE_URL already set (CI, or your own server): the command just runs.
// - otherwise: a throwaway server is started (scripts/embedded-postgres.mjs), DATABASE_URL is exported
//   to the command, and the server and its data are removed when the command ends.
// - --pg-major N (or `newest`): always a throwaway server of that PostgreSQL major, whatever
//   DATABASE_URL says (CI sets it to its own 15); PG_MAJOR=N is exported to the command.
// The command's exit code is passed on (128 + n if it died of signal n); SIGINT/SIGTERM/SIGHUP sent
// to this process are forwarded to it.
import { spawn } from 'node:child_process';
import os from 'node:os';
import { pgMajors, startEmbeddedPostgres } from './embedded-postgres.mjs';

let argv = process.argv.slice(2);
let major;
if (argv[0] === '--pg-major') {
  major = argv[1] === 'newest' ? pgMajors().at(-1) : Number(argv[1]);
  argv = argv.slice(2);
  if (!Number.isInteger(major)) {
    process.stderr.write(`with-postgres: --pg-major takes a major version or "newest" (available: ${pgMajors().join(', ')})\n`);
    process.exit(2);
  }
}
const [command, ...args] = argv;
if (!command) {
  process.stderr.write('usage: node scripts/with-postgres.mjs [--pg-major <N|newest>] <command> [args...]\n');
  process.exit(2);
}

let server;
if (!process.env.DATABASE_URL || major !== undefined) {
  try {
    server = await startEmbeddedPostgres({ major });
  } catch (error) {
    process.stderr.write(`with-postgres: could not start an embedded PostgreSQL: ${error instanceof Error ? error.message : error}\n`);
    process.exit(1);
  }
  process.stderr.write(`with-postgres: started a throwaway PostgreSQL${major ? ` ${major}` : ''}, DATABASE_URL=${server.url}\n`);
}

const env = server ? { ...process.env, DATABASE_URL: server.url, ...(major ? { PG_MAJOR: String(major) } : {}) } : process.env;
const exitCode = await run(command, args, env);
if (server) {
  try {
    await server.stop();
  } catch (error) {
    process.stderr.write(`with-postgres: stopping PostgreSQL failed: ${error instanceof Error ? error.message : error}\n`);
  }
}
process.exit(exitCode);

/** Runs the command with inherited stdio; resolves with its exit code. */
function run(file, argv, env) {
  return new Promise((resolve) => {
    const child = spawn(file, argv, { stdio: 'inherit', env });
    const forward = (signal) => {
      try {
        child.kill(signal);
      } catch {
        // already gone
      }
    };
    const signals = /** @type {const} */ (['SIGINT', 'SIGTERM', 'SIGHUP']);
    for (const signal of signals) process.on(signal, forward);
    child.once('error', (error) => {
      process.stderr.write(`with-postgres: cannot run ${file}: ${error.message}\n`);
      for (const signal of signals) process.off(signal, forward);
      resolve(/** @type {NodeJS.ErrnoException} */ (error).code === 'ENOENT' ? 127 : 126);
    });
    child.once('exit', (code, signal) => {
      for (const s of signals) process.off(s, forward);
      resolve(code ?? 128 + (signal ? os.constants.signals[signal] : 1));
    });
  });
}
