import 'reflect-metadata';
import { Injectable } from '@nestjs/common';
import { copyFile, mkdir } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobHandler, PermanentJobError, type Job, type JobContext } from '../../lib/index.js';
import { QUEUES, type DeliverWebhook, type ImportCatalog } from '../../sample-app/jobs/job-payloads.js';
import { waitFor } from '../support/engine.js';
import { aborted, bootSampleApp, Gates, type SampleApp } from '../support/sample-app.js';
import { nextClaims } from '../support/signals.js';

/**
 * The dashboard in a real headless Chromium (Debian's `chromium`, driven by playwright-core: nothing
 * is downloaded), on the sample app with jobs in every state. Each step saves a screenshot to
 * .browser-screenshots/ (git-ignored); with UPDATE_DOCS_SCREENSHOTS=1 the queues page and a dead
 * job's page are also copied to docs/. `npm run test:browser`.
 */

const ROOT = join(import.meta.dirname, '..', '..');
const SHOTS = join(ROOT, '.browser-screenshots');
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

const gates = new Gates();
const flaky = { healed: false };

/** Held running until the test opens its gate, or its signal aborts (a cancel). */
@Injectable()
class HeldJobs {
  @JobHandler('held', { concurrency: 2, prefetch: 0, leaseMs: 30_000 })
  async held(job: Job, ctx: JobContext): Promise<void> {
    await Promise.race([gates.wait(job.id), aborted(ctx.signal)]);
  }
}

/** Dies at once until the test "fixes the cause"; then succeeds. */
@Injectable()
class FlakyJobs {
  @JobHandler('flaky', { concurrency: 1 })
  async run(job: Job): Promise<void> {
    if (!flaky.healed) throw new PermanentJobError(`the importer rejected job ${job.id}`, { code: 'NOT_YET' });
  }
}

let s: SampleApp;
let browser: Browser;
let signedIn: BrowserContext;
let page: Page;
let shot = 0;

async function screenshot(name: string, target: Page = page): Promise<string> {
  const file = join(SHOTS, `${String(++shot).padStart(2, '0')}-${name}.png`);
  await target.screenshot({ path: file, fullPage: true });
  return file;
}

/** Where a step's page is, as the browser addresses it. */
const url = (path: string) => `${s.base}${path}`;

/** Fills the reason of a confirmation page and submits it. */
async function confirmWith(reason: string, submit: RegExp): Promise<void> {
  await page.getByLabel(/^Reason/).fill(reason);
  await page.getByRole('button', { name: submit }).click();
}

describe('the dashboard in Chromium', () => {
  beforeAll(async () => {
    await mkdir(SHOTS, { recursive: true });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    s = await bootSampleApp('browser', { pollIntervalMs: 200, scheduler: { intervalMs: 100 } }, [HeldJobs, FlakyJobs]);
    await s.queue.declareQueues(['graveyard', 'xss']);
  });

  afterAll(async () => {
    gates.openAll();
    await browser?.close();
    await s?.close();
  });

  it('refuses an anonymous request, and lets a person in through the sign-in form', async () => {
    const anonymous = await fetch(url('/pg-queue'));
    expect(anonymous.status).toBe(403);
    expect(await anonymous.text()).not.toContain('Queue imports');

    signedIn = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    page = await signedIn.newPage();
    const refused = await page.goto(url('/pg-queue'));
    expect(refused?.status()).toBe(403);
    await screenshot('refused');
    await page.getByRole('link', { name: 'Sign in' }).click();
    await page.getByLabel(/Your name/).fill('ada');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/pg-queue$/);
    await expect.poll(() => page.locator('header .who').textContent()).toContain('signed in as ada');
  });

  it('shows the sample with jobs in every state', async () => {
    // succeeded (after a retry), dead, scheduled, cancelled, running, pending.
    const webhook = await s.queue.enqueue<DeliverWebhook>(QUEUES.webhooks, { url: 'https://example.test/hook', event: 'paid', failuresBeforeSuccess: 1 });
    const imported = await s.queue.enqueue<ImportCatalog>(QUEUES.imports, { version: 1, source: 's3://bucket/catalog.csv' });
    await s.queue.enqueue(QUEUES.payments, { customerId: 'c1', amountCents: 1299 }, { delayMs: 3_600_000 });
    const cancelled = await s.queue.enqueue(QUEUES.payments, { customerId: 'c2', amountCents: 500 }, { delayMs: 3_600_000 });
    await s.queue.cancel(cancelled, { actor: 'setup', reason: 'a duplicate' });
    const held = await s.queue.enqueue('held', { step: 'running' });
    await s.queue.enqueueMany(Array.from({ length: 3 }, (_, n) => ({ queue: 'graveyard', payload: { n } })));
    await waitFor(async () => (await s.queue.get(webhook))?.status === 'succeeded' && (await s.queue.get(imported))?.status === 'dead' && gates.started.has(held));

    await page.goto(url('/pg-queue'));
    const table = page.getByRole('table');
    for (const queue of ['held', 'imports', 'payments', 'webhooks', 'graveyard']) await expect.poll(() => table.getByRole('link', { name: queue, exact: true }).count()).toBe(1);
    await screenshot('queues');
    if (process.env.UPDATE_DOCS_SCREENSHOTS) await copyFile(join(SHOTS, `${String(shot).padStart(2, '0')}-queues.png`), join(ROOT, 'docs', 'dashboard-queues.png'));

    // Each state's tab of a queue lists its jobs.
    const expectations: [string, string, string][] = [
      ['held', 'running', held],
      ['imports', 'dead', imported],
      ['payments', 'scheduled', ''],
      ['payments', 'cancelled', cancelled],
      ['webhooks', 'succeeded', webhook],
      ['graveyard', 'pending', ''],
    ];
    for (const [queue, state, id] of expectations) {
      await page.goto(url(`/pg-queue/queues/${queue}?state=${state}`));
      const rows = page.locator('tbody tr').filter({ has: page.locator('.badge', { hasText: state }) });
      expect(await rows.count(), `${queue} ${state}`).toBeGreaterThan(0);
      if (id) expect(await page.getByRole('link', { name: `#${id}`, exact: true }).count()).toBe(1);
    }
    await page.goto(url('/pg-queue/queues/held?state=running'));
    await screenshot('queue-running');
    // A running job's page shows its lease and token.
    await page.getByRole('link', { name: `#${held}`, exact: true }).click();
    await expect.poll(() => page.getByTestId('lease').textContent()).toContain('Fencing token');
    await screenshot('job-running');
    // A succeeded job's page shows its retry in the history, and its payload (the sample allows it outside payments).
    await page.goto(url(`/pg-queue/jobs/${webhook}`));
    expect(await page.getByTestId('payload').textContent()).toContain('example.test');
    expect(await page.getByRole('table').filter({ hasText: 'RECEIVER_UNAVAILABLE' }).count()).toBeGreaterThan(0);
    await screenshot('job-succeeded');
    await page.goto(url(`/pg-queue/jobs/${cancelled}`));
    expect(await page.textContent('main')).toContain('Hidden');
  });

  it('replays a dead job, which then succeeds', async () => {
    const id = await s.queue.enqueue('flaky', { attempt: 'first' });
    await waitFor(async () => (await s.queue.get(id))?.status === 'dead');
    await page.goto(url(`/pg-queue/jobs/${id}`));
    await screenshot('job-dead');
    if (process.env.UPDATE_DOCS_SCREENSHOTS) await copyFile(join(SHOTS, `${String(shot).padStart(2, '0')}-job-dead.png`), join(ROOT, 'docs', 'dashboard-dead-job.png'));
    flaky.healed = true; // the cause is fixed
    await page.getByRole('link', { name: 'Replay…' }).click();
    await screenshot('confirm-replay');
    await confirmWith('importer fixed in 1.4.2', /^Replay job/);
    await expect.poll(() => page.locator('[role="status"]').textContent()).toContain('replayed');
    await expect
      .poll(
        async () => {
          await page.reload();
          return page.getByTestId('job-status').textContent();
        },
        { timeout: 10_000 },
      )
      .toBe('succeeded');
    expect(await page.locator('main').textContent()).toContain('importer fixed in 1.4.2');
    const history = await s.queue.history(id);
    expect(history.find((e) => e.kind === 'replayed')).toMatchObject({ actor: 'ada', message: 'importer fixed in 1.4.2' });
  });

  it('cancels a running job: its handler is aborted', async () => {
    const id = await s.queue.enqueue('held', { step: 'cancel me' });
    await waitFor(() => gates.started.has(id));
    await page.goto(url(`/pg-queue/jobs/${id}`));
    await page.getByRole('link', { name: 'Cancel…' }).click();
    await confirmWith('stuck on a dead upstream', /^Cancel job/);
    await expect.poll(() => page.getByTestId('job-status').textContent()).toBe('cancelled');
    await screenshot('job-cancelled');
    // The handler heard its signal: the attempt ended (its lease released), with no completion.
    await waitFor(async () => (await s.queue.get(id))?.leaseOwner === null);
    expect((await s.queue.history(id)).find((e) => e.kind === 'cancelled')).toMatchObject({ actor: 'ada', message: 'stuck on a dead upstream' });
  });

  it('pauses a queue: a job enqueued then stays pending while its worker claims twice', async () => {
    await page.goto(url('/pg-queue/queues/graveyard'));
    await page.getByRole('link', { name: 'Pause…' }).click();
    await confirmWith('migrating the graveyard', /^Pause graveyard/);
    await expect.poll(() => page.getByTestId('queue-state').textContent()).toContain('paused');
    await page.goto(url('/pg-queue/queues/webhooks'));
    await page.getByRole('link', { name: 'Pause…' }).click();
    await confirmWith('receiver maintenance', /^Pause webhooks/);
    await expect.poll(() => page.getByTestId('queue-state').textContent()).toContain('paused');
    const id = await s.queue.enqueue<DeliverWebhook>(QUEUES.webhooks, { url: 'https://example.test/hook', event: 'while paused' });
    // The worker's claim counter advances by at least two claims, and neither takes the job.
    expect(await nextClaims(s.signals, QUEUES.webhooks, 2)).toEqual([]);
    await page.goto(url(`/pg-queue/jobs/${id}`));
    expect(await page.getByTestId('job-status').textContent()).toBe('pending');
    await page.goto(url('/pg-queue/queues/webhooks'));
    // The counts refresh without a reload (htmx polls the live fragment).
    await expect.poll(() => page.getByTestId('pending-count').textContent(), { timeout: 15_000 }).toBe('1');
    expect(await page.locator('main').textContent()).toContain('receiver maintenance');
    await screenshot('queue-paused');
    expect(await s.queue.queueHistory(QUEUES.webhooks)).toMatchObject([{ kind: 'paused', actor: 'ada', reason: 'receiver maintenance', wasPaused: false }]);
    await page.getByRole('link', { name: 'Resume…' }).click();
    await confirmWith('maintenance over', /^Resume webhooks/);
    await waitFor(async () => (await s.queue.get(id))?.status === 'succeeded');
  });

  it('pages through 1,000 dead jobs, replays a selection, then replays all of a code in batches with progress', async () => {
    await s.sql.query(
      `INSERT INTO pgqueue.jobs (queue_name, payload, status, attempt_count, max_attempts, finished_at, last_error_code, last_error_message)
       SELECT 'graveyard', jsonb_build_object('n', g), 'dead', 1, 1, now() - (g * interval '1 second'),
              CASE WHEN g % 10 = 0 THEN 'RARE' ELSE 'COMMON' END, 'failed number ' || g
       FROM generate_series(1, 1000) g`,
    );
    await page.goto(url('/pg-queue/queues/graveyard/dead?limit=100'));
    expect(await page.locator('main').textContent()).toContain('COMMON');
    await screenshot('dead-groups');
    const seen = new Set<string>();
    for (let pages = 0; pages < 20; pages++) {
      for (const value of await page.locator('[data-testid="dead-rows"] input[name="ids"]').evaluateAll((inputs) => inputs.map((i) => (i as unknown as { value: string }).value))) seen.add(value);
      const next = page.getByRole('link', { name: 'Next page →' });
      if ((await next.count()) === 0) break;
      await next.click();
    }
    expect(seen.size).toBe(1_000);

    // Replay two selected jobs of the RARE code.
    await page.goto(url('/pg-queue/queues/graveyard/dead?code=RARE'));
    const boxes = page.locator('[data-testid="dead-rows"] input[name="ids"]');
    await boxes.nth(0).check();
    await boxes.nth(1).check();
    await page.getByRole('button', { name: 'Replay selected…' }).click();
    await confirmWith('two samples first', /^Replay 2 jobs/);
    await expect.poll(() => page.locator('[role="status"]').textContent()).toContain('Replayed 2 of the 2 selected jobs');

    // Replay all of COMMON: 900 jobs, 100 per request, the progress bar advancing to the end.
    await page.goto(url('/pg-queue/queues/graveyard/dead'));
    await page.getByRole('link', { name: /^Replay all 900/ }).click();
    await confirmWith('the bug is fixed', /^Replay 900 jobs/);
    await expect.poll(() => page.getByTestId('progress-text').textContent(), { timeout: 30_000 }).toBe('Done: replayed 900 of 900.');
    await screenshot('replay-all-done');
    const groups = await s.queue.deadGroups('graveyard');
    expect(groups).toEqual([expect.objectContaining({ errorCode: 'RARE', count: 98 })]);
  });

  it('shows an error message holding <script> as text, and runs none of it', async () => {
    await s.sql.query(
      `INSERT INTO pgqueue.jobs (queue_name, payload, status, attempt_count, finished_at, last_error_code, last_error_message)
       VALUES ('xss', '{}', 'dead', 1, now(), 'X<b>SS', '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">')`,
    );
    const messages: string[] = [];
    page.on('console', (m) => messages.push(m.text()));
    await page.goto(url('/pg-queue/queues/xss/dead'));
    expect(await page.locator('main').textContent()).toContain('<script>window.__pwned = 1</script>');
    expect(await page.locator('main').textContent()).toContain('X<b>SS');
    expect(await page.evaluate(() => (globalThis as { __pwned?: number }).__pwned)).toBeUndefined();
    expect(await page.locator('main script, main img').count()).toBe(0);
    await screenshot('dead-xss');
    // No page of the dashboard asked for anything outside the origin (no CDN, no font).
    expect(messages.filter((m) => /Content Security Policy/i.test(m))).toEqual([]);
  });

  it('fits a phone: nothing wider than the screen but the tables, which scroll sideways; a keyboard reaches the actions', async () => {
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, storageState: await signedIn.storageState(), isMobile: true, hasTouch: true });
    const small = await phone.newPage();
    for (const path of ['/pg-queue', '/pg-queue/queues/graveyard/dead', '/pg-queue/queues/imports?state=dead']) {
      await small.goto(url(path));
      expect(await small.evaluate(() => (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement.scrollWidth), path).toBeLessThanOrEqual(391);
    }
    await small.goto(url('/pg-queue'));
    await screenshot('queues-phone', small);
    await phone.close();
    // The skip link first, then the page's links and buttons, in order.
    await page.goto(url('/pg-queue/queues/imports'));
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => (globalThis as unknown as { document: { activeElement: { textContent: string } | null } }).document.activeElement?.textContent)).toBe('Skip to content');
  });

  it('refuses a cross-site action: another origin\'s form, and a forged token', async () => {
    const dead = (await s.queue.listDead({ queue: 'graveyard', errorCode: 'RARE', limit: 1 })).jobs[0]!;
    // A page of another origin (another port) that posts the replay form to the dashboard, with the signed-in browser's cookies.
    const evil: Server = createServer((_req, res) => {
      res.setHeader('Content-Type', 'text/html');
      res.end(`<!doctype html><form id="f" method="post" action="${url('/pg-queue/actions/replay')}">
        <input name="id" value="${dead.id}"><input name="reason" value="pwned"><input name="_csrf" value="${'A'.repeat(43)}"></form>
        <script>document.getElementById('f').submit()</script>`);
    });
    await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', resolve));
    try {
      const attack = await signedIn.newPage();
      const answer = attack.waitForResponse((r) => r.url().includes('/pg-queue/actions/replay'));
      await attack.goto(`http://127.0.0.1:${(evil.address() as AddressInfo).port}/`);
      expect((await answer).status()).toBe(403);
      expect(await attack.locator('main').textContent()).toContain('did not come from a page of the dashboard');
      await screenshot('cross-site-refused', attack);
      await attack.close();
    } finally {
      await new Promise((resolve) => evil.close(resolve));
    }
    expect((await s.queue.get(dead.id))?.status).toBe('dead');
  });
});
