import { setTimeout as sleep } from 'node:timers/promises';
import { FAILURE_LOG_INTERVAL_MS, LogThrottle } from '../../lib/engine/log-throttle.js';
import { waitFor } from '../support/engine.js';

// The rules of bounded failure logging, on a short interval. Nothing here depends on how fast the
// machine is: every failure is reported synchronously, and each wait is a timer set after the
// throttle's own, and longer, so it cannot fire first however late timers run.

function capture() {
  const lines: string[] = [];
  return {
    lines,
    log: (m: string) => void lines.push(`log: ${m}`),
    warn: (m: string) => void lines.push(`warn: ${m}`),
    error: (m: string) => void lines.push(`error: ${m}`),
  };
}

const INTERVAL_MS = 50;

test('the interval is a named 30 s by default', () => {
  expect(FAILURE_LOG_INTERVAL_MS).toBe(30_000);
  expect(new LogThrottle(capture()).intervalMs).toBe(30_000);
});

test('the first failure of a kind is logged at once, the rest of the interval is counted into one summary, and recovery is one line', async () => {
  const logger = capture();
  const throttle = new LogThrottle(logger, INTERVAL_MS);
  for (let n = 1; n <= 57; n++) throttle.failed('Claim on queue "a"', `refused ${n}`, 'error', `Claim on queue "a" failed: refused ${n}. Retrying at the next poll.`);
  throttle.failed('Reaper pass', 'refused');
  expect(logger.lines).toEqual(['error: Claim on queue "a" failed: refused 1. Retrying at the next poll.', 'error: Reaper pass failed: refused']);

  await sleep(INTERVAL_MS * 3);
  expect(logger.lines.slice(2)).toEqual(['error: Claim on queue "a" failed 56 more times in the last 50 ms (last error: refused 57).']);

  // An interval without a failure ends the counting (the one the summary opened: wait it out), and
  // the next failure is logged at once again.
  await sleep(INTERVAL_MS * 2);
  throttle.failed('Claim on queue "a"', 'refused 58');
  expect(logger.lines.slice(3)).toEqual(['error: Claim on queue "a" failed: refused 58']);
  throttle.recovered('Claim on queue "a"');
  throttle.recovered('Claim on queue "a"'); // told once
  expect(logger.lines.slice(4)).toEqual([expect.stringMatching(/^log: Claim on queue "a" works again after 58 failures over \d+ ms \(last error: refused 58\)\.$/)]);
  await sleep(INTERVAL_MS * 3);
  expect(logger.lines).toHaveLength(5);

  // After it worked, a failure starts over.
  throttle.failed('Claim on queue "a"', 'refused again');
  expect(logger.lines.slice(5)).toEqual(['error: Claim on queue "a" failed: refused again']);
  throttle.flush();
});

test('while a kind keeps failing, each interval after a summary is counted too: one line per interval', async () => {
  const lines: string[] = [];
  let throttle!: LogThrottle;
  let summaries = 0;
  const logger = {
    log: (m: string) => void lines.push(`log: ${m}`),
    warn: (m: string) => void lines.push(`warn: ${m}`),
    error: (m: string) => {
      lines.push(`error: ${m}`);
      // Right after each summary (once the throttle is done with it), fail three more times.
      if (m.includes(' more time') && ++summaries < 3) queueMicrotask(() => [1, 2, 3].forEach(() => throttle.failed('Scheduler pass', 'refused')));
    },
  };
  throttle = new LogThrottle(logger, INTERVAL_MS);
  throttle.failed('Scheduler pass', 'refused');
  throttle.failed('Scheduler pass', 'refused');
  await waitFor(() => summaries >= 3);
  expect(lines).toEqual([
    'error: Scheduler pass failed: refused',
    'error: Scheduler pass failed 1 more time in the last 50 ms (last error: refused).',
    'error: Scheduler pass failed 3 more times in the last 50 ms (last error: refused).',
    'error: Scheduler pass failed 3 more times in the last 50 ms (last error: refused).',
  ]);
  throttle.flush();
});

test('a kind that flaps within an interval logs one recovery line, and the summary says it works again', async () => {
  const logger = capture();
  const throttle = new LogThrottle(logger, INTERVAL_MS);
  throttle.failed('Listener connection', 'reset', 'warn');
  throttle.recovered('Listener connection');
  throttle.failed('Listener connection', 'reset again', 'warn');
  throttle.recovered('Listener connection');
  throttle.failed('Listener connection', 'reset once more', 'warn');
  throttle.recovered('Listener connection');
  expect(logger.lines).toEqual(['warn: Listener connection failed: reset', expect.stringMatching(/^log: Listener connection works again after 1 failure over/)]);
  await sleep(INTERVAL_MS * 3);
  expect(logger.lines.slice(2)).toEqual(['warn: Listener connection failed 2 more times in the last 50 ms (last error: reset once more); it works again now.']);
});

test('a summary takes the highest level of what it counts; flush() writes what is still counted', () => {
  const logger = capture();
  const throttle = new LogThrottle(logger, 60_000);
  throttle.failed('Idle pool connection', 'reset', 'warn');
  throttle.failed('Idle pool connection', 'reset', 'warn');
  throttle.failed('Idle pool connection', 'broken', 'error');
  throttle.flush();
  expect(logger.lines).toEqual(['warn: Idle pool connection failed: reset', expect.stringMatching(/^error: Idle pool connection failed 2 more times in the last \d+ ms \(last error: broken\)\.$/)]);
  throttle.failed('Idle pool connection', 'reset', 'warn');
  expect(logger.lines).toHaveLength(3);
  throttle.flush();
});

test('an interval of 0 logs every failure, and still one recovery line', () => {
  const logger = capture();
  const throttle = new LogThrottle(logger, 0);
  for (let n = 1; n <= 3; n++) throttle.failed('Pruner pass', `refused ${n}`);
  throttle.recovered('Pruner pass');
  expect(logger.lines).toEqual([
    'error: Pruner pass failed: refused 1',
    'error: Pruner pass failed: refused 2',
    'error: Pruner pass failed: refused 3',
    expect.stringMatching(/^log: Pruner pass works again after 3 failures over \d+ ms/),
  ]);
});

test('recovered() of a kind that never failed writes nothing', () => {
  const logger = capture();
  new LogThrottle(logger, INTERVAL_MS).recovered('Claim on queue "b"');
  expect(logger.lines).toEqual([]);
});
