import { suiteConfig } from './vitest.suite.js';

// `npm run test:model -- --runs N [--seed S]`: the randomized model-based runs of the engine
// (test/model/), as many as asked; `npm test` runs a bounded number of them with the rest.

export default suiteConfig(['test/model/**/*.spec.ts']);
