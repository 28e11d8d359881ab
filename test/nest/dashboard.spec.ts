import 'reflect-metadata';
import { Module, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONTENT_SECURITY_POLICY, checkDashboardPlatform, DashboardError, escapeHtml, html, PgQueueDashboardModule } from '../../lib/dashboard/index.js';
import { PgQueueModule, QueueService } from '../../lib/index.js';
import { QUEUES, type ImportCatalog } from '../../sample-app/jobs/job-payloads.js';
import { waitFor } from '../support/engine.js';
import { CapturingLogger, nestSuite } from '../support/nest.js';
import { bootSampleApp, type SampleApp } from '../support/sample-app.js';

/** The dashboard module without a browser: its options, its routes beside the app's, its headers and its checks on actions. */

describe('options', () => {
  it('refuses to serve without a guard outside development, and says why', () => {
    for (const nodeEnv of [undefined, 'production', 'test']) {
      const refusal = (() => {
        const before = process.env.NODE_ENV;
        if (nodeEnv === undefined) delete process.env.NODE_ENV;
        else process.env.NODE_ENV = nodeEnv;
        try {
          PgQueueDashboardModule.forRoot();
          return undefined;
        } catch (error) {
          return error;
        } finally {
          process.env.NODE_ENV = before;
        }
      })();
      expect(refusal, String(nodeEnv)).toBeInstanceOf(DashboardError);
      expect((refusal as DashboardError).code).toBe('DASHBOARD_UNGUARDED');
      expect((refusal as DashboardError).message).toMatch(nodeEnv === undefined ? /unset \(which counts as production\)/ : new RegExp(`"${nodeEnv}"`));
      expect((refusal as DashboardError).message).toMatch(/guard: \(req\) => boolean.*allowUnguarded: true/);
    }
    expect(() => PgQueueDashboardModule.forRoot({ allowUnguarded: true })).not.toThrow();
    expect(() => PgQueueDashboardModule.forRoot({ guard: () => true })).not.toThrow();
    const before = process.env.NODE_ENV;
    process.env.NODE_ENV = 'development';
    try {
      expect(() => PgQueueDashboardModule.forRoot()).not.toThrow();
    } finally {
      process.env.NODE_ENV = before;
    }
  });

  it('refuses a bad path, an unknown option and a guard that is not a function', () => {
    const code = (options: object) => {
      try {
        PgQueueDashboardModule.forRoot({ allowUnguarded: true, ...options });
        return undefined;
      } catch (error) {
        return (error as DashboardError).code;
      }
    };
    expect(code({ path: 'pg-queue' })).toBe('DASHBOARD_INVALID_OPTION');
    expect(code({ path: '/pg-queue/' })).toBe('DASHBOARD_INVALID_OPTION');
    expect(code({ path: '/' })).toBe('DASHBOARD_INVALID_OPTION');
    expect(code({ gaurd: () => true })).toBe('DASHBOARD_INVALID_OPTION');
    expect(code({ guard: true })).toBe('DASHBOARD_INVALID_OPTION');
    expect(code({ refreshMs: 10 })).toBe('DASHBOARD_INVALID_OPTION');
    expect(code({ path: '/admin/queues' })).toBeUndefined();
  });

  it('runs on Express only: another platform (Fastify) is refused at start, with what to do', () => {
    expect(() => checkDashboardPlatform({ httpAdapter: { getType: () => 'express' } } as never)).not.toThrow();
    expect(() => checkDashboardPlatform(undefined)).not.toThrow();
    let refusal: unknown;
    try {
      checkDashboardPlatform({ httpAdapter: { getType: () => 'fastify' } } as never);
    } catch (error) {
      refusal = error;
    }
    expect(refusal).toMatchObject({ code: 'DASHBOARD_PLATFORM_UNSUPPORTED' });
    expect((refusal as Error).message).toMatch(/platform-express.*"fastify"/);
  });
});

describe('the template helper', () => {
  it('escapes every interpolated value, and only markup made by html is kept', () => {
    const hostile = `<script>alert("x")</script>' \`&`;
    expect(escapeHtml(hostile)).toBe('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#39; &#96;&amp;');
    const fragment = html`<b>${'<i>'}</b>`;
    expect(html`<p title="${hostile}">${fragment}${[hostile, null, undefined, false, 0]}</p>`.text).toBe(
      `<p title="${escapeHtml(hostile)}"><b>&lt;i&gt;</b>${escapeHtml(hostile)}0</p>`,
    );
  });
});

describe('in the sample app', () => {
  let s: SampleApp;
  const asAda = { 'x-actor': 'ada' };

  beforeAll(async () => {
    s = await bootSampleApp('dashboard', { pollIntervalMs: 100 });
  });
  afterAll(() => s?.close());

  /** A page of the dashboard as ada, and the form token its cookie carries. */
  async function page(path: string) {
    const response = await fetch(`${s.base}${path}`, { headers: asAda });
    const cookie = response.headers.get('set-cookie')?.split(';')[0] ?? '';
    return { response, text: await response.text(), cookie, token: cookie.split('=')[1] ?? '' };
  }

  async function deadImport(): Promise<string> {
    const id = await s.queue.enqueue<ImportCatalog>(QUEUES.imports, { version: 1, source: 's3://bucket/a.csv' });
    await waitFor(async () => (await s.queue.get(id))?.status === 'dead');
    return id;
  }

  const post = (path: string, form: Record<string, string>, headers: Record<string, string>) =>
    fetch(`${s.base}${path}`, { method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: new URLSearchParams(form) });

  it('serves its pages with a strict Content-Security-Policy, and its script from the htmx package', async () => {
    const { response, text } = await page('/pg-queue');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-security-policy')).toBe(CONTENT_SECURITY_POLICY);
    expect(CONTENT_SECURITY_POLICY).toMatch(/default-src 'none'; script-src 'self'; style-src 'self'/);
    expect(CONTENT_SECURITY_POLICY).not.toMatch(/unsafe/);
    expect(response.headers.get('x-frame-options')).toBe('DENY');
    expect(response.headers.get('cache-control')).toBe('no-store');
    // Every URL a page loads is the module's own: no CDN, no font.
    expect([...text.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]).filter((u) => !u!.startsWith('/pg-queue') && !u!.startsWith('#'))).toEqual([]);
    const script = await fetch(`${s.base}/pg-queue/assets/htmx.min.js`);
    expect(script.headers.get('content-type')).toMatch(/javascript/);
    expect(await script.text()).toMatch(/htmx/);
  });

  it('leaves the sample\'s own routes under /queues as they are, and is not shadowed by them', async () => {
    const rest = await s.post('/queues/reports/pause', { reason: 'REST' }, asAda);
    expect(rest.status).toBe(200);
    expect(await rest.json()).toEqual({ queue: 'reports', paused: true });
    expect(await (await s.get('/queues/reports/history')).json()).toMatchObject([{ kind: 'paused', actor: 'ada', reason: 'REST' }]);
    const dashboard = await page('/pg-queue/queues/reports');
    expect(dashboard.response.headers.get('content-type')).toMatch(/text\/html/);
    expect(dashboard.text).toContain('<h1>Queue reports</h1>');
    expect(dashboard.text).toContain('REST'); // the REST pause in the dashboard's audit trail
    expect((await s.post('/queues/reports/resume', {}, asAda)).status).toBe(200);
    // Nothing outside its path: the app's 404s stay the app's.
    expect((await s.get('/pg-queue-not')).status).toBe(404);
    expect((await fetch(`${s.base}/pg-queue/nope`, { headers: asAda })).status).toBe(404);
  });

  it('acts only with its form token, from its own origin, and records who and why', async () => {
    const id = await deadImport();
    const { cookie, token } = await page(`/pg-queue/confirm?action=replay&id=${id}`);
    const form = { id, reason: 'fixed', _csrf: token };
    // No token, a wrong one, another origin, another site: refused, nothing replayed.
    expect((await post('/pg-queue/actions/replay', { id, reason: 'x' }, { ...asAda, cookie })).status).toBe(403);
    expect((await post('/pg-queue/actions/replay', { ...form, _csrf: 'B'.repeat(43) }, { ...asAda, cookie })).status).toBe(403);
    expect((await post('/pg-queue/actions/replay', form, { ...asAda, cookie, origin: 'http://evil.example' })).status).toBe(403);
    expect((await post('/pg-queue/actions/replay', form, { ...asAda, cookie, 'sec-fetch-site': 'cross-site' })).status).toBe(403);
    expect((await s.queue.get(id))?.status).toBe('dead');
    // Without a reason: asked again.
    const noReason = await post('/pg-queue/actions/replay', { ...form, reason: ' ' }, { ...asAda, cookie, origin: s.base });
    expect(noReason.status).toBe(400);
    expect(await noReason.text()).toContain('Give a reason');
    const done = await post('/pg-queue/actions/replay', form, { ...asAda, cookie, origin: s.base });
    expect(done.status).toBe(303);
    expect(done.headers.get('location')).toBe(`/pg-queue/jobs/${id}?done=replayed&id=${id}`);
    expect((await s.queue.history(id)).find((e) => e.kind === 'replayed')).toMatchObject({ actor: 'ada', message: 'fixed' });
    // It runs and dies again (the importer is not fixed). A cancel of a dead job: the queue's own refusal, on the page that asked.
    await waitFor(async () => (await s.queue.get(id))?.status === 'dead' && (await s.queue.history(id)).length >= 3);
    const again = await post('/pg-queue/actions/cancel', form, { ...asAda, cookie, origin: s.base });
    expect(again.status).toBe(409);
    const text = await again.text();
    expect(text).toContain('JOB_NOT_CANCELLABLE');
    expect(text).toContain('name="reason"');
  });

  it('shows flow control where a queue has it (limits, top groups) and a flow job\'s parent and children', async () => {
    await s.engine.declareQueues(['dash-flow']);
    await s.queue.setLimits('dash-flow', { globalConcurrency: 3, groupConcurrency: 1 });
    await s.queue.enqueueMany(['acct:<b>1</b>', 'acct:2'].map((group) => ({ queue: 'dash-flow', payload: {}, options: { group } })));
    const queues = await page('/pg-queue');
    expect(queues.text).toContain('data-testid="flow-control"');
    expect(queues.text).toContain('of 3'); // running against globalConcurrency
    // A group name is the producer's text: escaped like any.
    expect(queues.text).toContain('acct:&lt;b&gt;1&lt;/b&gt;');
    expect(queues.text).not.toContain('<b>1</b>');
    // A queue without flow control shows none.
    const reports = await page('/pg-queue/queues/reports');
    expect(reports.text).not.toContain('data-testid="flow-control"');

    const flow = await s.queue.enqueueFlow({ queue: 'dash-flow', payload: {}, children: [{ queue: 'dash-flow', payload: {} }, { queue: 'dash-flow', payload: {} }] });
    const parent = await page(`/pg-queue/jobs/${flow.id}`);
    expect(parent.text).toContain('data-testid="flow-children"');
    for (const child of flow.children) expect(parent.text).toContain(`/pg-queue/jobs/${child.id}`);
    const child = await page(`/pg-queue/jobs/${flow.children[0]!.id}`);
    expect(child.text).toContain(`href="/pg-queue/jobs/${flow.id}" data-testid="flow-parent"`);

    // A queue with recurring schedules lists them (a schedule's name is text like any).
    await s.queue.schedules.upsert({ name: 'nightly-<i>x</i>', queue: 'dash-flow', cron: '0 3 * * *', tz: 'Europe/Paris', payload: {} });
    const withSchedules = await page('/pg-queue/queues/dash-flow');
    expect(withSchedules.text).toContain('data-testid="schedules"');
    expect(withSchedules.text).toContain('nightly-&lt;i&gt;x&lt;/i&gt;');
    expect(withSchedules.text).toContain('Europe/Paris');
  });

  it('refuses anonymous requests (the sample\'s guard) and names the sign-in', async () => {
    const anonymous = await fetch(`${s.base}/pg-queue/queues/imports`);
    expect(anonymous.status).toBe(403);
    expect(await anonymous.text()).toContain('href="/sign-in?returnTo=/pg-queue"');
    // The assets are public: the refusal page has its styles.
    expect((await fetch(`${s.base}/pg-queue/assets/dashboard.css`)).status).toBe(200);
  });
});

describe('under a global prefix', () => {
  let s: SampleApp;
  beforeAll(async () => {
    s = await bootSampleApp('dashboard-prefix', { pollIntervalMs: 100 }, [], { globalPrefix: 'api' });
  });
  afterAll(() => s?.close());

  it('serves at <prefix>/pg-queue with every link under it, beside the app\'s prefixed routes', async () => {
    const response = await fetch(`${s.base}/api/pg-queue`, { headers: { 'x-actor': 'ada' } });
    expect(response.status).toBe(200);
    const text = await response.text();
    expect(text).toContain('href="/api/pg-queue/queues/imports"');
    expect(text).toContain('src="/api/pg-queue/assets/htmx.min.js"');
    expect([...text.matchAll(/(?:src|href|hx-get)="(\/[^"]*)"/g)].map((m) => m[1]).filter((u) => !u!.startsWith('/api/pg-queue'))).toEqual([]);
    const queue = await (await fetch(`${s.base}/api/pg-queue/queues/imports?state=dead`, { headers: { 'x-actor': 'ada' } })).text();
    expect(queue).toContain('action="/api/pg-queue/queues/imports"');
    expect((await fetch(`${s.base}/pg-queue`)).status).toBe(404);
    expect((await s.post('/api/queues/reports/pause', {}, { 'x-actor': 'ada' })).status).toBe(200);
  });
});

describe('without an actor', () => {
  const suite = nestSuite('dashboard-noactor');

  it('lets a request look but not act, and says why', async () => {
    @Module({ imports: [PgQueueModule.forRoot({ connectionString: suite.url, queues: ['q'] }), PgQueueDashboardModule.forRoot({ allowUnguarded: true })] })
    class App {}
    const moduleRef = await Test.createTestingModule({ imports: [App] }).setLogger(new CapturingLogger()).compile();
    const app: INestApplication = suite.opened(moduleRef.createNestApplication());
    await app.listen(0, '127.0.0.1');
    const base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    const look = await fetch(`${base}/pg-queue/queues/q`);
    expect(look.status).toBe(200);
    expect(await look.text()).toContain('not signed in: you may look, not act');
    const confirm = await fetch(`${base}/pg-queue/confirm?action=pause&queue=q`);
    const cookie = confirm.headers.get('set-cookie')!.split(';')[0]!;
    expect(await confirm.text()).toContain('cannot act for you');
    const act = await fetch(`${base}/pg-queue/actions/pause`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', cookie, origin: base },
      body: new URLSearchParams({ queue: 'q', reason: 'r', _csrf: cookie.split('=')[1]! }),
    });
    expect(act.status).toBe(403);
    expect(await act.text()).toContain('could not tell who you are');
    expect((await app.get(QueueService).stats()).queues.find((q) => q.queue === 'q')?.paused).toBe(false);
  });
});
