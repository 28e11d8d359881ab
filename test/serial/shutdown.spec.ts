import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cp, mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineFixture } from '../support/engine.js';

/**
 * SIGTERM to a real Nest process with handlers mid-job (test/serial/fixtures/shutdown-app.ts):
 * handlers that finish within `shutdownTimeoutMs` complete, the others are aborted (or, if they
 * ignore their signal, abandoned) and released (fenced) back to `pending` with their attempt given
 * back, nothing is left `running` under the dead process's name, and the process exits 0.
 */
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const SHUTDOWN_TIMEOUT_MS = 1_500;

describe('graceful shutdown of a Nest process (SIGTERM)', () => {
  // Inside node_modules so that the compiled files resolve @nestjs/* and pg from the project.
  const outDir = join(ROOT, 'node_modules/.cache/nestjs-pg-queue-tests', `shutdown-${randomBytes(4).toString('hex')}`);
  let fixture: Awaited<ReturnType<typeof engineFixture>>;

  beforeAll(async () => {
    fixture = await engineFixture('shutdown');
    await promisify(execFile)(
      process.execPath,
      [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(ROOT, 'test/serial/fixtures/tsconfig.shutdown-app.json'), '--outDir', outDir],
      { cwd: ROOT },
    );
    // Files under node_modules have no package scope of their own: say they are ESM. The engine
    // finds its migrations at ../../migrations from lib/engine.
    await writeFile(join(outDir, 'package.json'), '{ "type": "module" }\n');
    await mkdir(join(outDir, 'migrations'), { recursive: true });
    await cp(join(ROOT, 'migrations'), join(outDir, 'migrations'), { recursive: true });
  }, 120_000);

  afterAll(async () => {
    await rm(outDir, { recursive: true, force: true });
    await fixture?.close();
  });

  it('drains, aborts and releases, then exits 0', async () => {
    const child = spawn(process.execPath, [join(outDir, 'test/serial/fixtures/shutdown-app.js')], {
      env: { ...process.env, DATABASE_URL: fixture.url, SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const output = watchOutput(child);
    try {
      await output.waitFor(/^READY$/m, 30_000);

      const producer = fixture.make();
      const quick = await producer.enqueueMany([
        { queue: 'quick', payload: { ms: 600 } },
        { queue: 'quick', payload: { ms: 600 } },
      ]);
      const slow = await producer.enqueueMany([
        { queue: 'slow', payload: { ms: 60_000 } },
        { queue: 'slow', payload: { ms: 60_000 } },
      ]);
      const [stubborn] = await producer.enqueueMany([{ queue: 'stubborn', payload: { ms: 60_000 } }]);
      for (const [queue, ids] of [['quick', quick], ['slow', slow], ['stubborn', [stubborn!]]] as const) {
        for (const id of ids) await output.waitFor(new RegExp(`^STARTED ${queue} ${id}$`, 'm'), 10_000);
      }

      const signalledAt = Date.now();
      child.kill('SIGTERM');
      const exit = await exited(child, 20_000);
      const elapsed = Date.now() - signalledAt;

      expect(exit, output.text()).toEqual({ code: 0, signal: null });
      // Running handlers got the whole timeout; then abort, a short grace, release.
      expect(elapsed).toBeGreaterThanOrEqual(SHUTDOWN_TIMEOUT_MS - 100);
      expect(elapsed).toBeLessThan(SHUTDOWN_TIMEOUT_MS + 6_000);

      for (const id of quick) expect(await producer.getJob(id)).toMatchObject({ status: 'succeeded', attemptCount: 1 });
      for (const id of [...slow, stubborn!]) {
        const job = await producer.getJob(id);
        expect(job, `job ${id}`).toMatchObject({ status: 'pending', attemptCount: 0, releaseCount: 1, leaseOwner: null, leaseExpiresAt: null });
        const history = await producer.getJobEvents(id);
        expect(history.map((e) => [e.kind, e.fromStatus, e.toStatus, e.errorCode])).toEqual([['released', 'running', 'pending', 'RELEASED']]);
        expect(history[0]!.worker).toMatch(/^shutdown-app:\d+$/);
      }
      const { rows } = await fixture.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE status = 'running'`);
      expect(rows[0]!.n).toBe(0);

      const text = output.text();
      for (const id of slow) expect(text).toContain(`ABORTED slow ${id}`);
      expect(text).toContain(`Job ${stubborn} (queue "stubborn") did not stop at shutdown; its lease is released.`);
      expect(text).toMatch(/Stopping: waiting up to 1500 ms for 5 job\(s\) in flight/);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  }, 60_000);
});

function watchOutput(child: ChildProcess) {
  let text = '';
  const waiters = new Set<() => void>();
  const onData = (chunk: Buffer) => {
    text += chunk.toString();
    for (const check of waiters) check();
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  return {
    text: () => text,
    waitFor(pattern: RegExp, timeoutMs: number): Promise<void> {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`output did not match ${pattern} within ${timeoutMs} ms:\n${text}`));
        }, timeoutMs);
        const check = () => {
          if (!pattern.test(text)) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve();
        };
        waiters.add(check);
        check();
      });
    },
  };
}

function exited(child: ChildProcess, timeoutMs: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolve, reject) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve({ code: child.exitCode, signal: child.signalCode });
    const timer = setTimeout(() => reject(new Error(`the process did not exit within ${timeoutMs} ms`)), timeoutMs);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal });
    });
  });
}
