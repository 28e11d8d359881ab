/** Every message of the dashboard module, as a function (see lib/pg-queue.messages.ts). */

export const DASHBOARD_UNGUARDED = (nodeEnv: string | undefined) =>
  `PgQueueDashboardModule has no guard, and NODE_ENV is ${nodeEnv === undefined ? 'unset (which counts as production)' : `"${nodeEnv}"`}: ` +
  'the dashboard replays, cancels and deletes jobs, so it is not served to anyone who asks. ' +
  "Pass guard: (req) => boolean (your authentication), or allowUnguarded: true for a machine nobody else reaches; NODE_ENV=development serves it unguarded too.";

export const DASHBOARD_INVALID_OPTION = (option: string, problem: string, fix: string) => `Invalid PgQueueDashboardModule option "${option}": ${problem}. ${fix}`;

export const DASHBOARD_PLATFORM_UNSUPPORTED = (platform: string) =>
  `PgQueueDashboardModule runs on @nestjs/platform-express; this application runs on "${platform}". ` +
  'Serve the dashboard from an Express application (a small second app on the same database works: the dashboard needs no workers, so give it processing: false).';

export const REFUSED_BY_GUARD = () => 'The dashboard\'s guard refused this request: sign in, or ask whoever runs it for access.';
export const NO_ACTOR = () =>
  'The dashboard could not tell who you are, and every action is recorded with who asked. Its actor option (default: req.user.id) returned nothing for this request.';
export const CROSS_SITE = () => 'Refused: this action did not come from a page of the dashboard (its origin, or its form token, does not match). Reload the page and try again.';
export const REASON_MISSING = () => 'Give a reason: it is recorded with the action, in the job\'s or the queue\'s history.';
export const NO_BODY = () =>
  'The form arrived without a body: the application parses no URL-encoded forms (NestFactory.create does by default; bodyParser: false turns it off).';
