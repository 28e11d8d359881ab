// Types for test/support/compile-engine.mjs (plain JS so that scripts/soak.mjs can use it too).

export interface CompiledEngine {
  /** node_modules/.cache/pgq-engine/<hash> */
  readonly dir: string;
  /** Where the compiled lib/ tree is: `<dir>/out`. */
  readonly outDir: string;
  /** The compiled entry file (default `<dir>/out/engine/index.js`). */
  readonly entry: string;
  /** A compiled file by its path under lib/, with .js: `module('engine/migrator.js')`. */
  module(relative: string): string;
}

/** Compiles lib/engine (or `entry`) with the project's tsc, once per version of the sources. */
export function compileEngine(options?: { entry?: string }): Promise<CompiledEngine>;
