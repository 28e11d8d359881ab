// nestjs-pg-queue/dashboard: the operator's dashboard, an entry point of its own so that an
// application that does not import it loads none of it.
export { PgQueueDashboardModule, checkDashboardPlatform } from './dashboard.module.js';
export { DashboardError } from './dashboard.errors.js';
export { CONTENT_SECURITY_POLICY } from './dashboard.security.js';
export { DASHBOARD_PATH_DEFAULT, DASHBOARD_REFRESH_MS_DEFAULT, type PgQueueDashboardOptions, type DashboardRequest } from './dashboard.options.js';
export { html, escapeHtml, Html } from './dashboard.html.js';
