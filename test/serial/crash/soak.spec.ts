import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * A short run of the chaos soak (scripts/soak.mjs), with small numbers: three worker processes,
 * three SIGKILLs (each worker restarted), three rounds of terminated sessions and one database
 * crash-restart, on a throwaway server of its own (never the shared one). The long run is
 * `npm run soak -- --jobs 20000 --kills 40` (see the README).
 */
const script = fileURLToPath(new URL('../../../scripts/soak.mjs', import.meta.url));

test('chaos soak (short): every job succeeded or dead, none lost, no stale completion, duplicates bounded by the chaos', async () => {
  const args = ['--jobs', '300', '--kills', '3', '--session-kills', '3', '--db-restarts', '1', '--workers', '3', '--json'];
  const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (err += chunk));
    child.on('error', reject);
    child.on('close', (exitCode) => resolve({ code: exitCode, stdout: out, stderr: err }));
  });
  const line = stdout.trim().split('\n').at(-1) ?? '';
  const summary = JSON.parse(line.startsWith('{') ? line : '{}');
  console.log(JSON.stringify({ test: 'soak', ...summary, options: undefined }));
  expect(summary.failures, stderr.slice(-4_000)).toEqual([]);
  expect(summary.ok).toBe(true);
  expect(code).toBe(0);
  expect(summary.chaos).toMatchObject({ kills: 3, sessionKills: 3, dbRestarts: 1, dbRestartsInServerLog: 1 });
  expect(summary.jobs.total).toBe(300);
  expect((summary.jobs.succeeded ?? 0) + (summary.jobs.dead ?? 0)).toBe(300);
  expect(summary.duplicateExecutions.total).toBeLessThanOrEqual(summary.duplicateExecutions.bound);
  expect(summary.sideEffects.effects).toBe(summary.jobs.succeeded);
}, 240_000);
