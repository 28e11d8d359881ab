import type { IncomingMessage } from 'node:http';
import type { JobRecord } from '../engine/index.js';
import { DashboardError } from './dashboard.errors.js';
import { DASHBOARD_INVALID_OPTION, DASHBOARD_UNGUARDED } from './dashboard.messages.js';

/**
 * The request as the dashboard's callbacks see it: Node's request, with what authentication
 * middleware usually adds (`user`, `cookies`). On Express it is Express's request: cast it to
 * `express.Request` to read more.
 */
export type DashboardRequest = IncomingMessage & { user?: unknown; cookies?: Record<string, string | undefined> };

export interface PgQueueDashboardOptions {
  /** Where the dashboard is served, under the application's global prefix. Default `/pg-queue`. */
  path?: string;
  /**
   * Who may open the dashboard: resolve true to serve the request, false to refuse it (403). Runs
   * on every request of the dashboard but its static assets. Without it the dashboard is served
   * only when `NODE_ENV` is `development` or `allowUnguarded` is true (the module refuses to start
   * otherwise). Global guards of the application (`APP_GUARD`) apply as well.
   */
  guard?: (req: DashboardRequest) => boolean | Promise<boolean>;
  /**
   * Who is asking, written to the audit trail of every action (the job's history, the queue's
   * trail). Default: `req.user.id`. A request without an actor may look but not act.
   */
  actor?: (req: DashboardRequest) => string | undefined | Promise<string | undefined>;
  /** Whether this request may see this job's payload (and its effects' results). Default: never. */
  showPayload?: (req: DashboardRequest, job: JobRecord) => boolean | Promise<boolean>;
  /** Serve without a guard whatever `NODE_ENV` says (a machine nobody else reaches). Default false. */
  allowUnguarded?: boolean;
  /** Shown as a "Sign in" link on the page of a refused request. */
  signInUrl?: string;
  /** A line shown at the top of every page (the sample says its sign-in is a development stand-in). */
  notice?: string;
  /** How often the counts, ages and sparklines refresh, in ms (default 5000, at least 1000). */
  refreshMs?: number;
}

export interface DashboardConfig {
  readonly path: string;
  readonly guard: ((req: DashboardRequest) => boolean | Promise<boolean>) | undefined;
  readonly actor: (req: DashboardRequest) => string | undefined | Promise<string | undefined>;
  readonly showPayload: (req: DashboardRequest, job: JobRecord) => boolean | Promise<boolean>;
  readonly signInUrl: string | undefined;
  readonly notice: string | undefined;
  readonly refreshMs: number;
}

export const DASHBOARD_PATH_DEFAULT = '/pg-queue';
export const DASHBOARD_REFRESH_MS_DEFAULT = 5_000;
/** Polling stops after this many refreshes without a page load (the page offers to go on): a forgotten tab stops reading. */
export const DASHBOARD_REFRESHES_MAX = 360;

const OPTION_NAMES = ['path', 'guard', 'actor', 'showPayload', 'allowUnguarded', 'signInUrl', 'notice', 'refreshMs'];

/** `req.user.id` (a string or a number), when authentication middleware set one. */
export function defaultActor(req: DashboardRequest): string | undefined {
  const user = req.user as { id?: unknown } | undefined;
  const id = user?.id;
  return typeof id === 'string' || typeof id === 'number' ? String(id) : undefined;
}

function invalid(option: string, problem: string, fix: string): DashboardError {
  return new DashboardError('DASHBOARD_INVALID_OPTION', DASHBOARD_INVALID_OPTION(option, problem, fix));
}

function optionalFunction<F>(name: string, value: unknown): F | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'function') throw invalid(name, 'it is not a function', `Pass (req) => … or leave it out.`);
  return value as F;
}

/** Checks the options, applies the defaults, and refuses an unguarded dashboard outside development. */
export function resolveDashboardOptions(options: PgQueueDashboardOptions, nodeEnv: string | undefined): DashboardConfig {
  if (options === null || typeof options !== 'object') throw invalid('options', 'not an object', 'Pass { guard, actor, … }.');
  for (const name of Object.keys(options)) {
    if (!OPTION_NAMES.includes(name)) throw invalid(name, 'no such option', `Use one of: ${OPTION_NAMES.join(', ')}.`);
  }
  const path = options.path ?? DASHBOARD_PATH_DEFAULT;
  if (typeof path !== 'string' || !/^(\/[A-Za-z0-9._~-]+)+$/.test(path)) {
    throw invalid('path', `${JSON.stringify(String(path).slice(0, 60))} is not a path of one or more segments`, 'Pass a path such as "/pg-queue" (no trailing slash).');
  }
  const guard = optionalFunction<DashboardConfig['guard']>('guard', options.guard);
  if (options.allowUnguarded !== undefined && typeof options.allowUnguarded !== 'boolean') throw invalid('allowUnguarded', 'not a boolean', 'Pass true or false.');
  if (!guard && options.allowUnguarded !== true && nodeEnv !== 'development') throw new DashboardError('DASHBOARD_UNGUARDED', DASHBOARD_UNGUARDED(nodeEnv));
  const refreshMs = options.refreshMs ?? DASHBOARD_REFRESH_MS_DEFAULT;
  if (!Number.isInteger(refreshMs) || refreshMs < 1_000 || refreshMs > 3_600_000) throw invalid('refreshMs', `${String(refreshMs)} is not an integer from 1000 to 3600000`, 'Pass a refresh interval in ms.');
  for (const name of ['signInUrl', 'notice'] as const) {
    if (options[name] !== undefined && typeof options[name] !== 'string') throw invalid(name, 'not a string', 'Pass a string or leave it out.');
  }
  return {
    path,
    guard,
    actor: optionalFunction<DashboardConfig['actor']>('actor', options.actor) ?? defaultActor,
    showPayload: optionalFunction<DashboardConfig['showPayload']>('showPayload', options.showPayload) ?? (() => false),
    signInUrl: options.signInUrl,
    notice: options.notice,
    refreshMs,
  };
}
