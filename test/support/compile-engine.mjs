// Compiles the engine (lib/engine) to JavaScript with the project's own TypeScript, for tests and
// scripts that run the real engine in child processes (plain `node`, no tsx/esbuild loader).
//
//   const engine = await compileEngine();
//   engine.entry                      // <cache>/out/engine/index.js
//   engine.module('engine/migrator.js')
//
// - The output lives under node_modules/.cache/pgq-engine/<hash>/, so the compiled files resolve
//   `pg` and friends from the project's node_modules, as the published package would.
// - <hash> covers the engine's sources, the tsconfig and the TypeScript version: a file that is
//   edited gets a fresh build; an unchanged engine is compiled once and reused by every test file
//   and script (parallel callers compile into private temp dirs and the first rename wins).
// - `<hash>/migrations` links to the repo's migrations/, which is where the compiled migrator
//   looks (`../../migrations` from out/engine/), so a child's `start()` can migrate as usual.
// - Types are not checked here (`noCheck`): `npm run typecheck` does that; only the emit matters.
//
// Plain JS on purpose: it runs inside vitest (test/**) and under plain node (scripts/soak.mjs).
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));
const cacheRoot = path.join(repoRoot, 'node_modules', '.cache', 'pgq-engine');
const STALE_AFTER_MS = 24 * 3_600_000;

/**
 * @param {{ entry?: string }} [options] entry: a .ts file relative to the repo (default lib/engine/index.ts)
 * @returns {Promise<{ dir: string, outDir: string, entry: string, module(relative: string): string }>}
 */
export async function compileEngine(options = {}) {
  const entry = options.entry ?? 'lib/engine/index.ts';
  const require = createRequire(import.meta.url);
  const tsc = require.resolve('typescript/bin/tsc');
  const tsVersion = JSON.parse(await fsp.readFile(require.resolve('typescript/package.json'), 'utf8')).version;
  const hash = await sourceHash([path.join(repoRoot, 'lib', 'engine'), path.join(repoRoot, 'tsconfig.json')], `${tsVersion}\n${entry}`);
  const dir = path.join(cacheRoot, hash);
  const result = (base) => {
    const outDir = path.join(base, 'out');
    const moduleOf = (relative) => path.join(outDir, relative);
    return { dir: base, outDir, entry: moduleOf(entry.replace(/^lib\//, '').replace(/\.ts$/, '.js')), module: moduleOf };
  };
  if (fs.existsSync(path.join(dir, 'complete'))) return result(dir);

  await fsp.mkdir(cacheRoot, { recursive: true });
  const temp = path.join(cacheRoot, `tmp-${process.pid}-${randomBytes(4).toString('hex')}`);
  await fsp.mkdir(temp);
  try {
    const tsconfig = path.join(temp, 'tsconfig.json');
    await fsp.writeFile(
      tsconfig,
      JSON.stringify({
        extends: path.join(repoRoot, 'tsconfig.json'),
        compilerOptions: {
          rootDir: path.join(repoRoot, 'lib'),
          outDir: path.join(temp, 'out'),
          types: ['node'],
          declaration: false,
          sourceMap: false,
          incremental: false,
          noCheck: true,
        },
        files: [path.join(repoRoot, entry)],
        include: [],
      }),
    );
    await fsp.writeFile(path.join(temp, 'package.json'), JSON.stringify({ type: 'module' }));
    await run(process.execPath, [tsc, '-p', tsconfig]);
    await fsp.symlink(path.join(repoRoot, 'migrations'), path.join(temp, 'migrations'), 'dir');
    await fsp.writeFile(path.join(temp, 'complete'), new Date().toISOString());
    try {
      await fsp.rename(temp, dir);
    } catch (error) {
      // Another caller finished the same build first: use theirs.
      if (!fs.existsSync(path.join(dir, 'complete'))) throw error;
      await fsp.rm(temp, { recursive: true, force: true });
    }
  } catch (error) {
    await fsp.rm(temp, { recursive: true, force: true });
    throw error;
  }
  await pruneStale(hash);
  return result(dir);
}

/** sha256 over the names and contents of every file under `paths` (sorted), plus `extra`. */
async function sourceHash(paths, extra) {
  const hash = createHash('sha256');
  hash.update(extra);
  const files = [];
  const walk = async (p) => {
    const stat = await fsp.stat(p);
    if (stat.isDirectory()) {
      for (const name of await fsp.readdir(p)) await walk(path.join(p, name));
    } else {
      files.push(p);
    }
  };
  for (const p of paths) await walk(p);
  for (const file of files.sort()) {
    hash.update(`\0${path.relative(repoRoot, file)}\0`);
    hash.update(await fsp.readFile(file));
  }
  return hash.digest('hex').slice(0, 16);
}

/** Drops builds of older sources (and temp dirs of crashed builds) after a day. */
async function pruneStale(keep) {
  for (const name of await fsp.readdir(cacheRoot).catch(() => [])) {
    if (name === keep) continue;
    const full = path.join(cacheRoot, name);
    try {
      const stat = await fsp.stat(full);
      if (Date.now() - stat.mtimeMs > STALE_AFTER_MS) await fsp.rm(full, { recursive: true, force: true });
    } catch {
      // already gone
    }
  }
}

function run(command, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${command} ${args.join(' ')} exited with ${code}:\n${output}`))));
  });
}
