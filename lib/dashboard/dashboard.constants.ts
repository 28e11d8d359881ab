/** The resolved options of PgQueueDashboardModule (DashboardConfig). */
export const DASHBOARD_CONFIG = 'pg-queue:dashboard-config';
