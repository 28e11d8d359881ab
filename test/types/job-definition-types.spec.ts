// Type-level checks: `npm run typecheck` compiles this file (tsconfig includes test/), and every
// `@ts-expect-error` below must meet an error, so a signature that types enqueue by the schema's
// output (or the handler by its input) fails the typecheck. At run time nothing here touches a
// database: the calls sit in functions that are only type-checked, never called.
import { describe, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import { defineJob, type Job, type JobDefinition, type JobToEnqueue, type PgQueue, type SchemaInput, type SchemaOutput } from '../../lib/engine/index.js';
import type { Queue, QueueService } from '../../lib/index.js';

/** A schema whose input and output differ: a transform (string in, number out) and a default (optional in, present out). */
const schema = z.object({ name: z.string().transform((s) => s.length), retries: z.number().default(3) });
const Signup = defineJob('signups', { schema });
type SignupInput = { name: string; retries?: number | undefined };
type SignupOutput = { name: number; retries: number };

describe('a definition whose schema transforms: enqueue takes its input, the handler gets its output', () => {
  it('types the definition by both', () => {
    expectTypeOf<SchemaInput<typeof schema>>().toEqualTypeOf<SignupInput>();
    expectTypeOf<SchemaOutput<typeof schema>>().toEqualTypeOf<SignupOutput>();
    expectTypeOf(Signup).toEqualTypeOf<JobDefinition<SignupOutput, SignupInput>>();
    // Without a schema there is one type for both.
    expectTypeOf(defineJob<{ n: number }>('plain')).toEqualTypeOf<JobDefinition<{ n: number }, { n: number }>>();
  });

  it('the engine: enqueue, enqueueMany and work', () => {
    const compileOnly = (engine: PgQueue) => {
      void engine.enqueue(Signup, { name: 'ada' });
      void engine.enqueue(Signup, { name: 'ada', retries: 5 });
      // @ts-expect-error the output type (name: number) is not what the producer gives
      void engine.enqueue(Signup, { name: 3, retries: 3 });
      const job: JobToEnqueue<SignupOutput, SignupInput> = { queue: Signup, payload: { name: 'ada' } };
      void engine.enqueueMany([job]);
      // @ts-expect-error the output type is not the input
      const wrong: JobToEnqueue<SignupOutput, SignupInput> = { queue: Signup, payload: { name: 3, retries: 3 } };
      void wrong;
      engine.work(Signup, async (job) => {
        expectTypeOf(job).toEqualTypeOf<Job<SignupOutput>>();
        expectTypeOf(job.payload.name).toBeNumber();
      });
      // A plain queue name stays as it was: the payload's type is the caller's.
      void engine.enqueue<{ to: string }>('emails', { to: 'ada@example.com' });
      // @ts-expect-error the caller's type is checked
      void engine.enqueue<{ to: string }>('emails', { to: 1 });
    };
    expectTypeOf(compileOnly).toBeFunction();
  });

  it('the Nest layer: QueueService and a Queue handle', () => {
    const compileOnly = (queue: QueueService, handle: Queue<SignupOutput, SignupInput>) => {
      void queue.enqueue(Signup, { name: 'ada' });
      // @ts-expect-error the output type is not the input
      void queue.enqueue(Signup, { name: 3, retries: 3 });
      void queue.enqueueMany([{ queue: Signup, payload: { name: 'ada' } }]);
      void handle.enqueue({ name: 'ada' });
      void handle.enqueueMany([{ payload: { name: 'ada' } }]);
      // @ts-expect-error the handle takes the input type
      void handle.enqueue({ name: 3, retries: 3 });
      // What is stored (and read back) is the validator's output.
      expectTypeOf(handle.get).returns.resolves.toEqualTypeOf<import('../../lib/index.js').JobRecord<SignupOutput> | undefined>();
    };
    expectTypeOf(compileOnly).toBeFunction();
  });
});
