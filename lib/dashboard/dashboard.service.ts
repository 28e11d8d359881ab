import { Inject, Injectable, Logger } from '@nestjs/common';
import type { ServerResponse } from 'node:http';
import {
  BROWSABLE_STATUSES,
  DatabaseConnectionError,
  DatabaseTimeoutError,
  DatabaseUnavailableError,
  EngineStoppedError,
  InvalidJobError,
  InvalidOptionError,
  JobStateError,
  OPERATOR_BATCH_MAX,
  PgQueueError,
  type BrowsableStatus,
  type OperatorNote,
} from '../engine/index.js';
import { pgQueueErrorStatus } from '../pg-queue-exception.filter.js';
import { QueueService } from '../queue.service.js';
import { DASHBOARD_CONFIG } from './dashboard.constants.js';
import { html, Html } from './dashboard.html.js';
import { CROSS_SITE, NO_ACTOR, NO_BODY, REASON_MISSING, REFUSED_BY_GUARD } from './dashboard.messages.js';
import type { DashboardConfig, DashboardRequest } from './dashboard.options.js';
import { formToken, sameOriginAction, setSecurityHeaders } from './dashboard.security.js';
import { confirmPage, progressPage, refusalPage, replayProgress, type Confirmation, type ReplayProgress } from './views/confirm.view.js';
import { deadPage } from './views/dead.view.js';
import { jobPage } from './views/job.view.js';
import { href, jobPath, queuePath, type ViewContext } from './views/layout.view.js';
import { queueCounts, queuePage } from './views/queue.view.js';
import { queuesLive, queuesPage } from './views/queues.view.js';

/** What a page handler answers: a page, a redirect after an action, or a page with another status. */
type Answer = Html | { redirect: string } | { status: number; page: Html };

/** Replay-all works one bounded batch per request (a listDead page and a replayMany of it). */
export const REPLAY_BATCH = 100;
const DEAD_PAGE_DEFAULT = 50;
const DEAD_PAGE_MAX = 200;
const ACTOR_MAX = 200;
const REASON_MAX = 1_000;
const QUEUE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;
const JOB_ID = /^[0-9]{1,19}$/;
const ERROR_CODE = /^.{1,64}$/s;

/** What the module catches and shows as the queue's own message, with the status the exception filter gives it. */
type QueueRefusal = InvalidJobError | InvalidOptionError | JobStateError | DatabaseUnavailableError | DatabaseTimeoutError | DatabaseConnectionError | EngineStoppedError;
function isQueueRefusal(error: unknown): error is QueueRefusal {
  return [InvalidJobError, InvalidOptionError, JobStateError, DatabaseUnavailableError, DatabaseTimeoutError, DatabaseConnectionError, EngineStoppedError].some((c) => error instanceof c);
}

/** A request the dashboard refuses before asking the queue (a bad id, a missing reason): 400 with this message. */
class BadDashboardRequest extends PgQueueError {
  readonly code = 'DASHBOARD_BAD_REQUEST';
  constructor(
    message: string,
    readonly status = 400,
  ) {
    super(message);
  }
}

/** The query string as one value per name (the first), and every value of a repeated one. */
class Query {
  constructor(private readonly params: URLSearchParams) {}
  static of(req: DashboardRequest): Query {
    return new Query(new URL(req.url ?? '/', 'http://dashboard.invalid').searchParams);
  }
  get(name: string): string | undefined {
    const value = this.params.get(name);
    return value === null || value === '' ? undefined : value;
  }
  all(name: string): string[] {
    return this.params.getAll(name);
  }
}

/** The form's fields (Express's urlencoded parser: a repeated name is an array). */
class Form {
  constructor(private readonly body: Record<string, unknown>) {}
  get(name: string): string | undefined {
    const value = this.body[name];
    const first = Array.isArray(value) ? value[0] : value;
    return typeof first === 'string' && first !== '' ? first : undefined;
  }
  all(name: string): string[] {
    const value = this.body[name];
    return (Array.isArray(value) ? value : [value]).filter((v): v is string => typeof v === 'string' && v !== '');
  }
}

function queueName(value: string | undefined): string {
  if (value === undefined || !QUEUE_NAME.test(value)) throw new BadDashboardRequest('That is not a queue name.', 404);
  return value;
}

function jobId(value: string | undefined): string {
  if (value === undefined || !JOB_ID.test(value)) throw new BadDashboardRequest('That is not a job id (job ids are numbers).', 404);
  return value;
}

function errorCode(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (!ERROR_CODE.test(value)) throw new BadDashboardRequest('An error code has 1-64 characters.');
  return value;
}

/** The messages after an action (`?done=`): fixed texts, filled with numbers and ids only. */
function doneNotice(query: Query): string | undefined {
  const n = Number(query.get('n') ?? 0);
  const of = Number(query.get('of') ?? 0);
  const id = query.get('id');
  const job = id && JOB_ID.test(id) ? `Job #${id}` : 'The job';
  switch (query.get('done')) {
    case 'replayed':
      return `${job} was replayed: it is pending again, with a fresh attempt budget.`;
    case 'cancelled':
      return `${job} was cancelled.`;
    case 'discarded':
      return `${job} was discarded: it is cancelled, with its history kept.`;
    case 'paused':
      return 'The queue is paused: no process claims its jobs until it is resumed.';
    case 'resumed':
      return 'The queue is resumed: its workers have been woken.';
    case 'replayed-selected':
      return `Replayed ${n} of the ${of} selected jobs${n < of ? ' (the others were no longer dead)' : ''}.`;
    case 'purged':
      return `Purged ${n} dead jobs (recorded in purges).`;
    default:
      return undefined;
  }
}

/** A flow job's children listed on its page (its first ones, by id). */
const JOB_CHILDREN_SHOWN = 100;

/**
 * The dashboard's pages and actions over QueueService (the engine's public operator API): no SQL
 * here. Every request runs the guard, then renders with the request's actor and form token; every
 * action also checks its origin and token, needs an actor and a reason, and records both.
 */
@Injectable()
export class DashboardService {
  private readonly logger = new Logger('PgQueueDashboard');

  constructor(
    @Inject(DASHBOARD_CONFIG) private readonly config: DashboardConfig,
    private readonly queue: QueueService,
  ) {}

  /**
   * Serves one request: `depth` is how many path segments follow the dashboard's base (so links
   * work under any global prefix), `answer` renders it.
   */
  async serve(req: DashboardRequest, res: ServerResponse, depth: number, answer: (ctx: ViewContext) => Promise<Answer>, action = false): Promise<void> {
    setSecurityHeaders(res);
    let ctx: ViewContext = { base: baseOf(req, depth), actor: undefined, csrf: '', notice: this.config.notice, refreshMs: this.config.refreshMs };
    try {
      if (this.config.guard && !(await this.config.guard(req))) {
        return send(res, 403, refusalPage(ctx, 'Not allowed', REFUSED_BY_GUARD(), this.config.signInUrl));
      }
      const actor = await this.config.actor(req);
      ctx = { ...ctx, actor: typeof actor === 'string' && actor.length > 0 && actor.length <= ACTOR_MAX ? actor : undefined, csrf: formToken(req, res) };
      if (action) {
        const body = (req as { body?: unknown }).body;
        if (body === undefined || body === null || typeof body !== 'object') return send(res, 400, refusalPage(ctx, 'No form', NO_BODY()));
        if (!sameOriginAction(req, body as Record<string, unknown>)) return send(res, 403, refusalPage(ctx, 'Refused', CROSS_SITE()));
        if (ctx.actor === undefined) return send(res, 403, refusalPage(ctx, 'Who are you?', NO_ACTOR()));
      }
      const out = await answer(ctx);
      if (out instanceof Html) return send(res, 200, out);
      if ('redirect' in out) {
        res.statusCode = 303;
        res.setHeader('Location', out.redirect);
        res.end();
        return;
      }
      return send(res, out.status, out.page);
    } catch (error) {
      if (error instanceof BadDashboardRequest) return send(res, error.status, refusalPage(ctx, error.status === 404 ? 'Not found' : 'Bad request', error.message));
      if (isQueueRefusal(error)) return send(res, pgQueueErrorStatus(error), refusalPage(ctx, 'Refused', `${error.message} (${error.code})`));
      this.logger.error(error instanceof Error ? (error.stack ?? error.message) : String(error));
      return send(res, 500, refusalPage(ctx, 'Something failed', 'The dashboard could not answer: the application\'s log has the error.'));
    }
  }

  // ------------------------------------------------------------------------------------------
  // Pages

  async queues(ctx: ViewContext, req: DashboardRequest): Promise<Answer> {
    const [stats, throughput] = await Promise.all([this.queue.stats(), this.queue.throughput()]);
    return queuesPage(ctx, stats, throughput, doneNotice(Query.of(req)));
  }

  async queuesLive(ctx: ViewContext, req: DashboardRequest): Promise<Answer> {
    const [stats, throughput] = await Promise.all([this.queue.stats(), this.queue.throughput()]);
    return queuesLive(ctx, stats, throughput, refreshes(Query.of(req)));
  }

  async queuePage(ctx: ViewContext, req: DashboardRequest, name: string): Promise<Answer> {
    const queue = queueName(name);
    const query = Query.of(req);
    const stats = await this.queueStats(queue);
    const state = (query.get('state') ?? 'pending') as BrowsableStatus;
    if (!BROWSABLE_STATUSES.includes(state)) throw new BadDashboardRequest(`There is no state "${state.slice(0, 20)}".`);
    const code = errorCode(query.get('code'));
    const cursor = query.get('cursor');
    const [page, audit, schedules] = await Promise.all([
      this.queue.listJobs({ queue, status: state, errorCode: code, cursor }),
      this.queue.queueHistory(queue, { limit: 10 }),
      this.queue.schedules.list({ queue, limit: 100 }),
    ]);
    return queuePage(ctx, { stats, state, errorCode: code, cursor, page, audit, schedules }, doneNotice(query));
  }

  async queueLive(ctx: ViewContext, req: DashboardRequest, name: string): Promise<Answer> {
    return queueCounts(ctx, await this.queueStats(queueName(name)), refreshes(Query.of(req)));
  }

  async deadPage(ctx: ViewContext, req: DashboardRequest, name: string): Promise<Answer> {
    const queue = queueName(name);
    const query = Query.of(req);
    const code = errorCode(query.get('code'));
    const cursor = query.get('cursor');
    const limit = Math.min(DEAD_PAGE_MAX, Math.max(1, Number.parseInt(query.get('limit') ?? '', 10) || DEAD_PAGE_DEFAULT));
    const [stats, groups, page] = await Promise.all([this.queueStats(queue), this.queue.deadGroups(queue), this.queue.listDead({ queue, errorCode: code, cursor, limit })]);
    return deadPage(ctx, { stats, groups, errorCode: code, cursor, page, limit }, doneNotice(query));
  }

  async jobPage(ctx: ViewContext, req: DashboardRequest, id: string): Promise<Answer> {
    const jobIdValue = jobId(id);
    const job = await this.queue.get(jobIdValue);
    if (!job) throw new BadDashboardRequest(`There is no job #${jobIdValue} (it may have been pruned or deleted).`, 404);
    const [history, effects, showPayload, children] = await Promise.all([
      this.queue.history(jobIdValue),
      this.queue.effects(jobIdValue),
      this.config.showPayload(req, job),
      this.queue.listChildren(jobIdValue, { limit: JOB_CHILDREN_SHOWN }),
    ]);
    return jobPage(ctx, { job, history, effects, showPayload: showPayload === true, children }, doneNotice(Query.of(req)));
  }

  /** `GET …/jobs?id=`: the "go to job" box. */
  async goToJob(ctx: ViewContext, req: DashboardRequest): Promise<Answer> {
    return { redirect: href(ctx, jobPath(jobId(Query.of(req).get('id')))) };
  }

  // ------------------------------------------------------------------------------------------
  // Confirmations and actions

  async confirm(ctx: ViewContext, req: DashboardRequest): Promise<Answer> {
    const query = Query.of(req);
    return confirmPage(ctx, await this.confirmation(ctx, query.get('action'), (name) => query.get(name), (name) => query.all(name)));
  }

  async act(ctx: ViewContext, req: DashboardRequest, action: string): Promise<Answer> {
    const form = new Form((req as { body?: Record<string, unknown> }).body ?? {});
    const field = (name: string) => form.get(name);
    const reason = form.get('reason')?.trim();
    const again = async (error: { code?: string; message: string }, status: number) => ({
      status,
      page: confirmPage(ctx, await this.confirmation(ctx, action, field, (name) => form.all(name)), { error, reason }),
    });
    if (!reason) return again({ message: REASON_MISSING() }, 400);
    const note: OperatorNote = { actor: ctx.actor, reason: reason.slice(0, REASON_MAX) };
    try {
      return await this.perform(ctx, req, action, form, note);
    } catch (error) {
      // The queue's own refusal (a job that is no longer dead, a finished one, an unknown queue), on the page that asked.
      if (isQueueRefusal(error)) return again(error, pgQueueErrorStatus(error));
      throw error;
    }
  }

  private async perform(ctx: ViewContext, req: DashboardRequest, action: string, form: Form, note: OperatorNote): Promise<Answer> {
    switch (action) {
      case 'replay':
      case 'cancel':
      case 'discard': {
        const id = jobId(form.get('id'));
        if (action === 'replay') await this.queue.replay(id, note);
        else if (action === 'cancel') await this.queue.cancel(id, note);
        else await this.queue.discard(id, note);
        const done = { replay: 'replayed', cancel: 'cancelled', discard: 'discarded' }[action];
        return { redirect: href(ctx, jobPath(id), { done, id }) };
      }
      case 'pause':
      case 'resume': {
        const queue = queueName(form.get('queue'));
        if (action === 'pause') await this.queue.pause(queue, note);
        else await this.queue.resume(queue, note);
        return { redirect: href(ctx, queuePath(queue), { done: action === 'pause' ? 'paused' : 'resumed' }) };
      }
      case 'replay-selected': {
        const queue = queueName(form.get('queue'));
        const ids = selectedIds(form.all('ids'));
        const outcomes = await this.queue.replayMany(ids, note);
        return { redirect: href(ctx, `${queuePath(queue)}/dead`, { done: 'replayed-selected', n: outcomes.filter((o) => o.replayed).length, of: ids.length }) };
      }
      case 'replay-code': {
        const progress = await this.replayBatch(ctx, form, note);
        // htmx asks for the next batch from the progress section; a plain form gets the whole page.
        return req.headers['hx-request'] === 'true' ? replayProgress(ctx, progress) : progressPage(ctx, progress);
      }
      case 'purge': {
        const queue = queueName(form.get('queue'));
        const olderThan = purgeBefore(form.get('days'));
        const removed = await this.queue.purgeDead({ olderThan, queue, ...note });
        return { redirect: href(ctx, `${queuePath(queue)}/dead`, { done: 'purged', n: removed }) };
      }
      default:
        throw new BadDashboardRequest('There is no such action.', 404);
    }
  }

  /**
   * One batch of "replay every dead job of this code": the oldest dead jobs of the code that died
   * no later than `bound` (the newest death when the operator confirmed). A job replayed here that
   * dies again dies after the bound, so it is not replayed a second time, and the run ends even
   * when the cause is not fixed.
   */
  private async replayBatch(ctx: ViewContext, form: Form, note: OperatorNote): Promise<ReplayProgress> {
    const queue = queueName(form.get('queue'));
    const code = errorCode(form.get('code'));
    if (code === undefined) throw new BadDashboardRequest('Which error code?');
    const bound = new Date(form.get('bound') ?? '');
    if (!Number.isFinite(bound.getTime())) throw new BadDashboardRequest('The replay lost its starting point: start it again from the dead jobs page.');
    const total = Math.max(0, Number.parseInt(form.get('total') ?? '0', 10) || 0);
    let done = Math.max(0, Number.parseInt(form.get('done') ?? '0', 10) || 0);
    const page = await this.queue.listDead({ queue, errorCode: code, limit: REPLAY_BATCH });
    const ids = page.jobs.filter((j) => j.finishedAt.getTime() <= bound.getTime()).map((j) => j.id);
    if (ids.length > 0) done += (await this.queue.replayMany(ids, note)).filter((o) => o.replayed).length;
    return { queue, code, bound: bound.toISOString(), total, done, reason: note.reason ?? '', finished: ids.length < REPLAY_BATCH, back: href(ctx, `${queuePath(queue)}/dead`) };
  }

  /** The confirmation page of an action, from its fields (the query of GET …/confirm, or the form that failed). */
  private async confirmation(ctx: ViewContext, action: string | undefined, field: (name: string) => string | undefined, all: (name: string) => string[]): Promise<Confirmation> {
    switch (action) {
      case 'replay':
      case 'cancel':
      case 'discard': {
        const id = jobId(field('id'));
        const job = await this.queue.get(id);
        if (!job) throw new BadDashboardRequest(`There is no job #${id}.`, 404);
        const back = href(ctx, jobPath(id));
        const what = html`Job #${id} of queue ${job.queue} (now ${job.status}${job.lastErrorCode ? html`, last error <code>${job.lastErrorCode}</code>` : ''})`;
        if (action === 'replay') {
          return { action, title: `Replay job #${id}?`, effect: html`${what} goes back to pending with a fresh attempt budget: the same id, idempotency key and history.`, fields: { id }, submit: `Replay job #${id}`, back };
        }
        if (action === 'cancel') {
          const running = job.status === 'running' ? ' Its handler is aborted on the process that runs it, and its late completion is refused.' : '';
          return { action, title: `Cancel job #${id}?`, effect: html`${what} becomes cancelled and will not run.${running}`, fields: { id }, submit: `Cancel job #${id}`, danger: true, back };
        }
        return { action, title: `Discard job #${id}?`, effect: html`${what} becomes cancelled without running again; its history is kept.`, fields: { id }, submit: `Discard job #${id}`, danger: true, back };
      }
      case 'pause':
      case 'resume': {
        const queue = queueName(field('queue'));
        const back = href(ctx, queuePath(queue));
        return action === 'pause'
          ? { action, title: `Pause queue ${queue}?`, effect: html`No process claims jobs of ${queue} until it is resumed; running jobs finish. Enqueueing goes on.`, fields: { queue }, submit: `Pause ${queue}`, danger: true, back }
          : { action, title: `Resume queue ${queue}?`, effect: html`Every process may claim jobs of ${queue} again; its workers are woken now.`, fields: { queue }, submit: `Resume ${queue}`, back };
      }
      case 'replay-selected': {
        const queue = queueName(field('queue'));
        const ids = selectedIds(all('ids'));
        return {
          action,
          title: `Replay ${ids.length} selected job${ids.length === 1 ? '' : 's'}?`,
          effect: html`Jobs ${ids.map((id, i) => html`${i ? ', ' : ''}#${id}`)} of ${queue} go back to pending, each with a fresh attempt budget. One that is no longer dead is left as it is.`,
          fields: { queue, ids },
          submit: `Replay ${ids.length} job${ids.length === 1 ? '' : 's'}`,
          back: href(ctx, `${queuePath(queue)}/dead`),
        };
      }
      case 'replay-code': {
        const queue = queueName(field('queue'));
        const code = errorCode(field('code'));
        const group = (await this.queue.deadGroups(queue)).find((g) => g.errorCode === code);
        if (!code || !group) throw new BadDashboardRequest(`${queue} has no dead job with that code now.`, 404);
        return {
          action,
          title: `Replay all ${group.count} dead jobs with code ${code}?`,
          effect: html`Every job of ${queue} that died with <code>${code}</code> up to now (${group.count}) goes back to pending, ${REPLAY_BATCH} at a time, with progress shown. A job that dies again meanwhile is not replayed twice. Fix the cause first.`,
          fields: { queue, code, bound: group.newestAt.toISOString(), total: String(group.count), done: '0' },
          submit: `Replay ${group.count} jobs`,
          back: href(ctx, `${queuePath(queue)}/dead`, { code }),
        };
      }
      case 'purge': {
        const queue = queueName(field('queue'));
        const before = purgeBefore(field('days'));
        return {
          action,
          title: `Purge dead jobs of ${queue}?`,
          effect: html`Dead jobs of ${queue} that died before ${before.toISOString()} are deleted with their history, for good; each batch's ids are recorded in purges.`,
          fields: { queue, days: field('days') ?? '' },
          submit: 'Purge',
          danger: true,
          back: href(ctx, `${queuePath(queue)}/dead`),
        };
      }
      default:
        throw new BadDashboardRequest('There is no such action.', 404);
    }
  }

  private async queueStats(queue: string) {
    const stats = (await this.queue.stats()).queues.find((q) => q.queue === queue);
    if (!stats) throw new BadDashboardRequest(`There is no queue "${queue}" (it is declared when a worker or a producer first uses it).`, 404);
    return stats;
  }
}

function selectedIds(values: string[]): string[] {
  const ids = [...new Set(values)];
  if (ids.length === 0) throw new BadDashboardRequest('Select at least one job first.');
  if (ids.length > OPERATOR_BATCH_MAX) throw new BadDashboardRequest(`Select at most ${OPERATOR_BATCH_MAX} jobs at a time.`);
  for (const id of ids) jobId(id);
  return ids;
}

function purgeBefore(days: string | undefined): Date {
  const n = Number(days);
  if (days === undefined || !Number.isInteger(n) || n < 0 || n > 36_500) throw new BadDashboardRequest('Give a whole number of days, from 0 to 36500.');
  return new Date(Date.now() - n * 86_400_000);
}

function refreshes(query: Query): number {
  const n = Number.parseInt(query.get('n') ?? '0', 10);
  return Number.isFinite(n) && n > 0 ? n : 0;
}

/**
 * The dashboard's absolute path for this request: its path less the `depth` segments the route
 * adds, so links carry the application's global prefix (and any mount point) without knowing it.
 */
function baseOf(req: DashboardRequest, depth: number): string {
  const path = ((req as { originalUrl?: string }).originalUrl ?? req.url ?? '/').split('?')[0]!;
  const segments = path.split('/').filter((s) => s !== '');
  return `/${segments.slice(0, segments.length - depth).join('/')}`;
}

function send(res: ServerResponse, status: number, page: Html): void {
  res.statusCode = status;
  res.setHeader('Content-Type', 'text/html; charset=utf-8');
  res.end(page.text);
}
