import { InvalidJobError, InvalidPayloadError, PgQueue } from '../../lib/engine/index.js';
import { engineFixture, waitForOutcome } from '../support/engine.js';

// Payloads are JSON (issue 16): what a handler reads is exactly what the producer passed. A value
// JSON would change silently, or PostgreSQL's jsonb would refuse (raw 22P05 / 22P02 / 23502 before),
// is refused at enqueue with INVALID_PAYLOAD, the path of the value and what to convert it to.

let fx: Awaited<ReturnType<typeof engineFixture>>;
let q: PgQueue;
beforeAll(async () => {
  fx = await engineFixture('payloads');
  q = fx.make();
  await q.declareQueues(['mail']);
});
afterAll(() => fx.close());

const jobCount = async () => (await fx.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pgqueue.job_rows')).rows[0]!.n;

async function refusal(call: () => Promise<unknown>): Promise<InvalidPayloadError> {
  const error = await call().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(InvalidPayloadError);
  // Still an InvalidJobError: code that catches those keeps catching these.
  expect(error).toBeInstanceOf(InvalidJobError);
  return error as InvalidPayloadError;
}

class Money {
  constructor(readonly cents: number) {}
}

const sparse: unknown[] = [1];
sparse[2] = 3;

// [case, payload, path, message]
const refused: [string, unknown, string, RegExp][] = [
  ['a Date deep in the payload', { user: { createdAt: new Date(0) } }, 'payload.user.createdAt', /payload\.user\.createdAt is a Date: convert it to a string \(date\.toISOString\(\)\)/],
  ['a Map', { tags: new Map([['a', 1]]) }, 'payload.tags', /is a Map: convert it to a plain object \(Object\.fromEntries\(map\)\)/],
  ['a Set', { ids: new Set([1]) }, 'payload.ids', /is a Set: convert it to an array/],
  ['a class instance', { price: new Money(5) }, 'payload.price', /is an instance of Money, not a plain object: copy the fields/],
  ['a Buffer', { file: Buffer.from('x') }, 'payload.file', /is binary data \(Buffer\)/],
  ['a string with U+0000', { name: 'a\u0000b' }, 'payload.name', /is a string that contains U\+0000 \(\\u0000\), which PostgreSQL cannot store/],
  ['a property name with U+0000', { 'a\u0000': 1 }, 'payload["a\\u0000"]', /is a property name that contains U\+0000/],
  ['a lone surrogate', { s: 'x\ud800' }, 'payload.s', /a lone surrogate/],
  ['undefined in an array', { list: [1, undefined] }, 'payload.list[1]', /payload\.list\[1\] is undefined: use null/],
  ['a hole in an array', { list: sparse }, 'payload.list[1]', /is a hole in a sparse array/],
  ['a BigInt', { n: 1n }, 'payload.n', /is a BigInt: convert it to a string/],
  ['NaN', { n: Number.NaN }, 'payload.n', /is NaN, not a finite number/],
  ['-Infinity', [Number.NEGATIVE_INFINITY], 'payload[0]', /is -Infinity, not a finite number/],
  ['a function', { f() {} }, 'payload.f', /is a function/],
  ['a symbol', { s: Symbol('s') }, 'payload.s', /is a symbol/],
  ['an odd key', { 'a b': { c: new Date() } }, 'payload["a b"].c', /payload\["a b"\]\.c is a Date/],
  ['a Date as the whole payload', new Date(), 'payload', /^job \(queue "mail"\): payload is a Date/],
  ['undefined as the whole payload', undefined, 'payload', /payload is undefined: pass null/],
];

test.each(refused)('%s is refused with INVALID_PAYLOAD, its path and the fix, and nothing is written', async (_name, payload, path, message) => {
  const before = await jobCount();
  const error = await refusal(() => q.enqueue('mail', payload));
  expect(error).toMatchObject({ code: 'INVALID_PAYLOAD', path, name: 'InvalidPayloadError' });
  expect(error.message).toMatch(message);
  expect(error.message).toMatch(/Payloads are JSON: .* Nothing was enqueued\.$/);
  expect(await jobCount()).toBe(before);
});

test('enqueueMany: one bad payload refuses the batch, naming the job, and writes nothing of it', async () => {
  const before = await jobCount();
  const error = await refusal(() =>
    q.enqueueMany([
      { queue: 'mail', payload: { ok: true } },
      { queue: 'mail', payload: { ok: true } },
      { queue: 'mail', payload: { sentAt: new Date() } },
    ]),
  );
  expect(error.message).toMatch(/^jobs\[2\] \(queue "mail"\): payload\.sentAt is a Date/);
  expect(await jobCount()).toBe(before);
});

test('null is stored as JSON null (it was a not-null violation, 23502), and reaches the handler as null', async () => {
  const id = await q.enqueue('mail', null);
  expect((await q.getJob(id))?.payload).toBeNull();
  const { rows } = await fx.pool.query<{ t: string }>('SELECT jsonb_typeof(payload) AS t FROM pgqueue.job_rows WHERE id = $1', [id]);
  expect(rows[0]!.t).toBe('null');
  const ids = await q.enqueueMany([
    { queue: 'mail', payload: null },
    { queue: 'mail', payload: { inner: null } },
  ]);
  expect(await Promise.all(ids.map(async (i) => (await q.getJob(i))?.payload))).toEqual([null, { inner: null }]);

  const worker = fx.make();
  await worker.declareQueues(['nulls']);
  const seen: unknown[] = [];
  worker.work('nulls', async (job) => void seen.push(job.payload));
  await worker.start();
  const nullJob = await worker.enqueue('nulls', null);
  await waitForOutcome(worker, nullJob, 'succeeded');
  expect(seen).toEqual([null]);
});

test('plain JSON round-trips as it was given; a property holding undefined is left out, as JSON does', async () => {
  const payload = {
    s: 'héllo ✓ 😀',
    n: -1.5,
    big: Number.MAX_SAFE_INTEGER,
    b: false,
    nil: null,
    list: [1, 'two', [3], { four: 4 }],
    nested: { deeper: { deepest: [] } },
    noProto: Object.assign(Object.create(null) as object, { x: 1 }),
  };
  const id = await q.enqueue('mail', payload);
  expect((await q.getJob(id))?.payload).toEqual(JSON.parse(JSON.stringify(payload)));
  const optional = await q.enqueue('mail', { to: 'a@example.com', cc: undefined });
  expect((await q.getJob(optional))?.payload).toStrictEqual({ to: 'a@example.com' });
  // The same object twice (not a cycle) is fine.
  const shared = { x: 1 };
  const twice = await q.enqueue('mail', { a: shared, b: shared });
  expect((await q.getJob(twice))?.payload).toEqual({ a: { x: 1 }, b: { x: 1 } });
});
