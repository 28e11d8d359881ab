import * as v from 'valibot';
import { describe, expect, it } from 'vitest';
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
