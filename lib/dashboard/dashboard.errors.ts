import { PgQueueError } from '../engine/index.js';

/** The dashboard refused its configuration or its platform. Raised when the module is built or started. */
export class DashboardError extends PgQueueError {
  constructor(
    readonly code: 'DASHBOARD_UNGUARDED' | 'DASHBOARD_INVALID_OPTION' | 'DASHBOARD_PLATFORM_UNSUPPORTED',
    message: string,
  ) {
    super(message);
  }
}
