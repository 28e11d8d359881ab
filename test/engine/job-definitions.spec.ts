import * as v from 'valibot';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  checkUpcasters,
  defineJob,
  InvalidJobError,
  InvalidOptionError,
  payloadForHandler,
  payloadToEnqueue,
  PermanentJobError,
  RetryableJobError,
  type StandardSchema,
} from '../../lib/engine/index.js';
import { engineFixture, waitForStatus } from '../support/engine.js';

/** The rules of a definition, without a database: validation at enqueue, upcasting and validation before the handler. */
describe('defineJob', () => {
  const Email = defineJob('emails', { schema: z.object({ to: z.email(), name: z.string().trim().default('friend') }), version: 2 });

  it('stores the validator output at enqueue (defaults filled, strings trimmed)', async () => {
    expect(await payloadToEnqueue(Email, { to: 'ada@example.com', name: '  Ada ' })).toEqual({ to: 'ada@example.com', name: 'Ada' });
    expect(await payloadToEnqueue(Email, { to: 'ada@example.com' })).toEqual({ to: 'ada@example.com', name: 'friend' });
  });

  it('refuses a payload the schema refuses with INVALID_PAYLOAD naming each path', async () => {
    const error = await payloadToEnqueue(Email, { to: 'not an email', name: 7 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidJobError);
    expect(error).toMatchObject({ path: "payload.to" });
    expect(error).toMatchObject({ code: 'INVALID_PAYLOAD' });
    expect((error as Error).message).toMatch(/"emails" job \(version 2\).*payload\.to: .*payload\.name: /);
  });

  it('takes any Standard Schema validator, async ones included (valibot, a hand-written one)', async () => {
    const Valibot = defineJob('v', { schema: v.object({ n: v.pipe(v.number(), v.minValue(1)) }) });
    expect(await payloadToEnqueue(Valibot, { n: 2 })).toEqual({ n: 2 });
    await expect(payloadToEnqueue(Valibot, { n: 0 })).rejects.toMatchObject({ code: 'INVALID_PAYLOAD' });
    const slow: StandardSchema<unknown, { ok: true }> = {
      '~standard': {
        version: 1,
        vendor: 'test',
        validate: async (value) => ((value as { ok?: unknown }).ok === true ? { value: { ok: true } } : { issues: [{ message: 'not ok', path: [{ key: 'ok' }] }] }),
      },
    };
    const Async = defineJob('async', { schema: slow });
    expect(await payloadToEnqueue(Async, { ok: true })).toEqual({ ok: true });
    await expect(payloadToEnqueue(Async, { ok: false })).rejects.toThrow(/payload\.ok: not ok/);
    const throwing = defineJob('t', { schema: { '~standard': { version: 1, vendor: 'x', validate: () => { throw new Error('boom'); } } } as StandardSchema });
    await expect(payloadToEnqueue(throwing, {})).rejects.toThrow(/the validator threw: boom/);
  });

  it('without a schema, passes the payload through, typed', async () => {
    const Plain = defineJob<{ n: number }>('plain');
    expect(Plain.version).toBe(1);
    expect(await payloadToEnqueue(Plain, { n: 1 })).toEqual({ n: 1 });
  });

  it('refuses bad definitions with the option named', () => {
    expect(() => defineJob('not ok')).toThrow(InvalidOptionError);
    expect(() => defineJob('q', { version: 0 })).toThrow(/defineJob\('q'\)\.version/);
    expect(() => defineJob('q', { schema: {} as StandardSchema })).toThrow(/not a Standard Schema validator/);
  });

  describe('before the handler', () => {
    // Version 1 had { email }; version 2 is { to, name }.
    const upcast = checkUpcasters('EmailJobs.send', Email, { 1: (old: { email: string }) => ({ to: old.email }) });

    it('upcasts an older version, then validates (defaults applied)', async () => {
      expect(await payloadForHandler(Email, upcast, 1, { email: 'ada@example.com' })).toEqual({ to: 'ada@example.com', name: 'friend' });
      // A job enqueued without a definition (NULL version) is version 1.
      expect(await payloadForHandler(Email, upcast, null, { email: 'grace@example.com' })).toEqual({ to: 'grace@example.com', name: 'friend' });
      expect(await payloadForHandler(Email, upcast, 2, { to: 'x@example.com', name: 'X' })).toEqual({ to: 'x@example.com', name: 'X' });
    });

    it('makes a mismatch dead with INVALID_PAYLOAD', async () => {
      const error = await payloadForHandler(Email, upcast, 2, { to: 'nope' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PermanentJobError);
      expect(error).toMatchObject({ code: 'INVALID_PAYLOAD' });
    });

    it('kills an older version without an upcaster path, naming the upcaster to add', async () => {
      const error = await payloadForHandler(Email, {}, 1, { email: 'a@example.com' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PermanentJobError);
      expect((error as Error).message).toMatch(/add upcast: \{ 1: \(payload\) => … \}/);
    });

    it('retries a version newer than the handler knows (a producer deployed first)', async () => {
      const error = await payloadForHandler(Email, upcast, 3, { to: 'a@example.com' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RetryableJobError);
      expect(error).toMatchObject({ code: 'JOB_VERSION_TOO_NEW' });
    });

    it('refuses upcasters that cannot apply', () => {
      expect(() => checkUpcasters('h', Email, { 2: (p: unknown) => p })).toThrow(/version 2 is not below the definition's version 2/);
      expect(() => checkUpcasters('h', Email, { 1: 'no' })).toThrow(/h\.upcast\.1/);
    });
  });
});

/** On the real engine: validation at enqueue writes nothing, versions are stored, a deploy that changes the shape keeps queued jobs. */
describe('job definitions on the engine', () => {
  let fx: Awaited<ReturnType<typeof engineFixture>>;
  beforeAll(async () => {
    fx = await engineFixture('definitions');
  });
  afterAll(async () => {
    await fx?.close();
  });

  const V1 = defineJob('signups', { schema: z.object({ email: z.email() }) });
  const V2 = defineJob('signups', { schema: z.object({ to: z.email(), name: z.string().default('friend') }), version: 2 });

  it('stores the validated payload and its version; a refused payload writes nothing of the batch', async () => {
    const producer = fx.make();
    await producer.declareQueues(['signups']);
    const id = await producer.enqueue(V2, { to: 'ada@example.com' } as { to: string; name: string });
    const { rows } = await fx.pool.query(`SELECT payload, payload_version FROM pgqueue.job_rows WHERE id = $1`, [id]);
    expect(rows[0]).toEqual({ payload: { to: 'ada@example.com', name: 'friend' }, payload_version: 2 });
    const before = (await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows`)).rows[0].n;
    const error = await producer
      .enqueueMany([
        { queue: V2, payload: { to: 'grace@example.com', name: 'G' } },
        { queue: V2, payload: { to: 'nope', name: 'N' } },
      ])
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'INVALID_PAYLOAD', path: 'payload.to' });
    expect((error as Error).message).toMatch(/^jobs\[1\]: .*Nothing was enqueued\./);
    expect((await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows`)).rows[0].n).toBe(before);
    // A plain enqueue has no version.
    const plain = await producer.enqueue('signups', { email: 'old@example.com' });
    expect((await fx.pool.query(`SELECT payload_version FROM pgqueue.job_rows WHERE id = $1`, [plain])).rows[0].payload_version).toBeNull();
    await fx.pool.query(`DELETE FROM pgqueue.jobs; DELETE FROM pgqueue.jobs_succeeded`);
  });

  it('a deploy that changes the shape: jobs queued as version 1 run on the version 2 handler through its upcaster', async () => {
    // The old deploy enqueued version 1 jobs (and one without a definition); no worker ran them.
    const old = fx.make();
    await old.declareQueues(['signups']);
    const queued = [await old.enqueue(V1, { email: 'a@example.com' }), await old.enqueue(V1, { email: 'b@example.com' }), await old.enqueue('signups', { email: 'c@example.com' })];
    await old.stop(1_000);
    // The new deploy: version 2, an upcaster from 1. One job each of version 2, a bad one, and a newer one.
    const seen: { id: string; payload: unknown; version: number | null }[] = [];
    const next = fx.make();
    next.work(
      V2,
      async (job) => {
        seen.push({ id: job.id, payload: job.payload, version: job.version });
      },
      { upcast: { 1: (p: { email: string }) => ({ to: p.email }) }, maxAttempts: 2, backoff: { baseMs: 10, maxMs: 10 } },
    );
    await next.declareQueues(['signups']);
    const current = await next.enqueue(V2, { to: 'd@example.com', name: 'D' });
    const bad = await next.enqueue('signups', { to: 'not an email' });
    await fx.pool.query(`UPDATE pgqueue.jobs SET payload_version = 2 WHERE id = $1`, [bad]);
    const newer = await next.enqueue('signups', { to: 'e@example.com', whatever: true });
    await fx.pool.query(`UPDATE pgqueue.jobs SET payload_version = 3 WHERE id = $1`, [newer]);
    await next.start();
    for (const id of [...queued, current]) await waitForStatus(next, id, 'succeeded');
    expect(seen.find((s) => s.id === queued[0])).toEqual({ id: queued[0], payload: { to: 'a@example.com', name: 'friend' }, version: 1 });
    expect(seen.find((s) => s.id === queued[2])).toEqual({ id: queued[2], payload: { to: 'c@example.com', name: 'friend' }, version: null });
    expect(seen.find((s) => s.id === current)).toEqual({ id: current, payload: { to: 'd@example.com', name: 'D' }, version: 2 });
    // A payload that does not match: dead at once, with the code, its handler never called.
    expect(await waitForStatus(next, bad, 'dead')).toMatchObject({ lastErrorCode: 'INVALID_PAYLOAD', attemptCount: 1 });
    // A version newer than this worker's: retried (for a newer worker), dead only when the attempts run out.
    expect(await waitForStatus(next, newer, 'dead')).toMatchObject({ lastErrorCode: 'JOB_VERSION_TOO_NEW', attemptCount: 2 });
    expect(seen.map((s) => s.id)).not.toContain(bad);
    expect(seen.map((s) => s.id)).not.toContain(newer);
  });

  it('refuses upcasters without a definition', () => {
    expect(() => fx.make().work('signups', async () => {}, { upcast: {} } as never)).toThrow(/upcasters need a job definition/);
  });
});
