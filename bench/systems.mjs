// The benchmark's systems by name, so that run.mjs and a worker process it forks
// (bench/lib/worker-process.mjs) load the same adapter from the same description.
//
// A spec is JSON: { engine: null | '/path/to/dist/engine/index.js', key, label } for a build of
// ours, or { peer: 'pg-boss' } for a peer adapter in bench/peers/.
import { loadEngine } from './ours.mjs';

export const PEERS = {
  'pg-boss': './peers/pg-boss.mjs',
  'graphile-worker': './peers/graphile-worker.mjs',
};

/** The system a spec names; `system.spec` is the spec again (for a forked process). */
export async function loadSystem(spec) {
  if (spec.peer) {
    if (!PEERS[spec.peer]) throw new Error(`unknown peer "${spec.peer}" (known: ${Object.keys(PEERS).join(', ')})`);
    const module = await import(PEERS[spec.peer]);
    return { ...module, spec };
  }
  return loadEngine(spec.engine ?? undefined, { key: spec.key, label: spec.label ?? undefined });
}
