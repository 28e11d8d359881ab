import { PermanentJobError, RetryableJobError, type JobEvent } from '../../lib/engine/index.js';
import { backoffDelayMs, classifyFailure, decideRetry } from '../../lib/engine/retry.js';
import { engineFixture, waitFor, waitForOutcome } from '../support/engine.js';

describe('classification and backoff (unit)', () => {
  const backoff = { baseMs: 100, maxMs: 1_000 };

  test('full jitter: each delay lies in [0, min(max, base * 2^(attempt-1))], and the cap doubles', () => {
    expect([1, 2, 3, 4, 5, 6].map((a) => backoffDelayMs(a, backoff, () => 0.999999))).toEqual([99, 199, 399, 799, 999, 999]);
    expect(backoffDelayMs(3, backoff, () => 0)).toBe(0);
    const samples = Array.from({ length: 2_000 }, () => backoffDelayMs(3, backoff));
    expect(Math.min(...samples)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...samples)).toBeLessThan(400);
    const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
    expect(mean).toBeGreaterThan(150); // uniform over [0, 400): mean ~200
    expect(mean).toBeLessThan(250);
  });

  test('permanent errors are dead at once; retryable ones honour retry-after; unknown ones get a small budget', () => {
    const permanent = classifyFailure(new PermanentJobError('bad payload', { code: 'BAD_PAYLOAD' }));
    expect(permanent).toMatchObject({ class: 'permanent', code: 'BAD_PAYLOAD' });
    expect(decideRetry(permanent, 1, 5, 3, backoff)).toEqual({ dead: true, delayMs: 0 });

    const retryable = classifyFailure(new RetryableJobError('rate limited', { retryAfterMs: 5_000, code: 'RATE_LIMITED' }));
    expect(decideRetry(retryable, 1, 5, 3, backoff)).toEqual({ dead: false, delayMs: 5_000 });
    expect(decideRetry(retryable, 5, 5, 3, backoff).dead).toBe(true);

    const unknown = classifyFailure(Object.assign(new Error('unexpected end of JSON input'), { code: 'ERR_BAD_RESPONSE' }));
    expect(unknown).toMatchObject({ class: 'unknown', code: 'ERR_BAD_RESPONSE' });
    // A lost connection is transient wherever it was raised (D18), with its own code.
    expect(classifyFailure(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }))).toMatchObject({ class: 'transient', code: 'ECONNRESET' });
    expect(classifyFailure(new Error('Connection terminated unexpectedly'))).toMatchObject({ class: 'transient', code: 'CONNECTION_LOST' });
    expect(decideRetry(unknown, 2, 10, 3, backoff).dead).toBe(false);
    expect(decideRetry(unknown, 3, 10, 3, backoff).dead).toBe(true);
  });

  test('non-Error throws and huge messages are stored bounded, on one line, without a stack', () => {
    const thrown = classifyFailure('plain string');
    expect(thrown).toMatchObject({ class: 'unknown', code: 'NON_ERROR_THROWN' });
    expect(thrown.message).toContain('plain string');
    const big = classifyFailure(new Error(`line one\n${'x'.repeat(5_000)}`));
    expect(big.message.length).toBeLessThanOrEqual(1_000);
    expect(big.message).not.toContain('\n');
    expect(big.message).not.toContain('at ');
  });

  test('error classes refuse malformed codes and delays', () => {
    expect(() => new PermanentJobError('x', { code: 'lower case' })).toThrow(/UPPER_SNAKE_CASE/);
    expect(() => new RetryableJobError('x', { retryAfterMs: -1 })).toThrow(/retryAfterMs/);
    expect(() => new RetryableJobError('x', { retryAfterMs: 400 * 24 * 3_600_000 })).toThrow(/retryAfterMs/);
  });

  test('D13: a fractional retry-after is rounded up to whole milliseconds', () => {
    expect(new RetryableJobError('x', { retryAfterMs: 12.2 }).retryAfterMs).toBe(13);
    const failure = classifyFailure(new RetryableJobError('x', { retryAfterMs: 0.5 }));
    expect(decideRetry(failure, 1, 5, 3, backoff)).toEqual({ dead: false, delayMs: 1 });
  });
});

describe('retries against the database', () => {
  let fx: Awaited<ReturnType<typeof engineFixture>>;
  beforeAll(async () => {
    fx = await engineFixture('retries');
  });
  afterAll(() => fx.close());

  test('a permanent error goes to dead after one attempt, with its code and message', async () => {
    const q = fx.make();
    q.work('perm', async () => {
      throw new PermanentJobError('unsupported payload version 9', { code: 'UNSUPPORTED_VERSION' });
    });
    await q.start();
    const id = await q.enqueue('perm', { v: 9 });
    const job = await waitForOutcome(q, id, 'dead');
    expect(job).toMatchObject({ attemptCount: 1, lastErrorCode: 'UNSUPPORTED_VERSION', lastErrorMessage: 'unsupported payload version 9' });
    expect((await q.getJobEvents(id)).map((e) => e.kind)).toEqual(['dead']);
  });

  test('a transient error retries with growing jittered delays and ends dead after max attempts, row kept', async () => {
    const q = fx.make({ scheduler: { intervalMs: 20 } });
    const failures: Extract<JobEvent, { type: 'failed' }>[] = [];
    q.onJobEvent((e) => e.type === 'failed' && failures.push(e));
    const startedAt: number[] = [];
    q.work('flaky', async () => {
      startedAt.push(Date.now());
      throw new RetryableJobError('upstream timed out', { code: 'UPSTREAM_TIMEOUT' });
    }, { maxAttempts: 4, backoff: { baseMs: 100, maxMs: 10_000 } });
    await q.start();
    const id = await q.enqueue('flaky', {});
    const job = await waitForOutcome(q, id, 'dead');
    expect(job).toMatchObject({ attemptCount: 4, lastErrorCode: 'UPSTREAM_TIMEOUT' });
    expect(failures.map((f) => [f.attempt, f.dead])).toEqual([[1, false], [2, false], [3, false], [4, true]]);
    // Each retry's delay lies within its attempt's doubling cap...
    failures.slice(0, 3).forEach((f, i) => {
      expect(f.delayMs).toBeGreaterThanOrEqual(0);
      expect(f.delayMs).toBeLessThan(100 * 2 ** i);
    });
    // ...and the next attempt did not start before its delay had passed.
    for (let i = 1; i < startedAt.length; i++) expect(startedAt[i]! - startedAt[i - 1]!).toBeGreaterThanOrEqual(failures[i - 1]!.delayMs - 5);
    const events = await q.getJobEvents(id);
    expect(events.map((e) => [e.kind, e.attempt, e.errorCode])).toEqual([
      ['retry_scheduled', 1, 'UPSTREAM_TIMEOUT'],
      ['retry_scheduled', 2, 'UPSTREAM_TIMEOUT'],
      ['retry_scheduled', 3, 'UPSTREAM_TIMEOUT'],
      ['dead', 4, 'UPSTREAM_TIMEOUT'],
    ]);
  });

  test('an unknown error uses the small budget, and a handler throwing a non-Error is recorded clearly', async () => {
    const q = fx.make({ scheduler: { intervalMs: 20 } });
    q.work('weird', async () => {
      throw 'not an error object';
    }, { maxAttempts: 10, unknownErrorAttempts: 2, backoff: { baseMs: 0, maxMs: 0 } });
    await q.start();
    const id = await q.enqueue('weird', {});
    const job = await waitForOutcome(q, id, 'dead');
    expect(job.attemptCount).toBe(2);
    expect(job.lastErrorCode).toBe('NON_ERROR_THROWN');
    expect(job.lastErrorMessage).toMatch(/non-Error value \(string\): not an error object/);
  });

  test('D13: a fractional retryAfterMs is recorded as the handler asked, not lost to a failed write', async () => {
    const q = fx.make({ scheduler: { intervalMs: 20 }, reaper: { intervalMs: 60_000 } });
    q.work('fractional', async (job) => {
      if (job.attempt === 1) throw new RetryableJobError('slow down', { retryAfterMs: 12.5, code: 'SLOW_DOWN' });
    }, { leaseMs: 30_000 });
    await q.start();
    const id = await q.enqueue('fractional', {});
    await waitForOutcome(q, id, 'succeeded');
    expect((await q.getJobEvents(id)).map((e) => [e.kind, e.errorCode])).toEqual([['retry_scheduled', 'SLOW_DOWN']]);
  });

  test('a job whose handler succeeds after a transient failure ends succeeded', async () => {
    const q = fx.make({ scheduler: { intervalMs: 20 } });
    let calls = 0;
    q.work('recover', async (job) => {
      calls++;
      if (job.attempt === 1) throw new RetryableJobError('blip', { retryAfterMs: 50 });
    });
    await q.start();
    const id = await q.enqueue('recover', {});
    await waitForOutcome(q, id, 'succeeded');
    expect(calls).toBe(2);
  });
});
