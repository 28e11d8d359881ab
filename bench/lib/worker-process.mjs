// One worker process of a multi-process processing run (processingProcesses in bench/scenarios.mjs),
// driven over IPC: { type: 'open', spec, openOptions, concurrency, settings, expected } → 'ready';
// { type: 'start' } starts the worker; { type: 'stop' } → { type: 'stopped', handled, processCores }
// and the process exits. Any failure is reported as { type: 'error', message } and exits 1.
import { loadSystem } from '../systems.mjs';
import { cpuMeter } from './diag.mjs';

let handle;
let config;
let handled = 0;
let cpu;

process.on('message', (message) => {
  step(message).catch((error) => {
    process.send?.({ type: 'error', message: error?.stack ?? String(error) });
    process.exit(1);
  });
});
// The parent went away (killed, crashed): do not linger holding connections.
process.on('disconnect', () => process.exit(0));

async function step(message) {
  if (message.type === 'open') {
    config = message;
    const sys = await loadSystem(message.spec);
    handle = await sys.open({ ...message.openOptions, diag: false });
    process.send({ type: 'ready' });
  } else if (message.type === 'start') {
    cpu = cpuMeter();
    await handle.startWorker({
      concurrency: config.concurrency,
      settings: config.settings,
      handler: () => {
        handled += 1;
      },
    });
  } else if (message.type === 'stop') {
    const usage = cpu?.stop() ?? {};
    await handle.close();
    process.send({ type: 'stopped', handled, processCores: usage.processCores ?? null }, () => process.exit(0));
  }
}
