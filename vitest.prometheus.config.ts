import { suiteConfig } from './vitest.suite.js';

// `npm run test:prometheus`: the checks that need Prometheus's own tools (Debian package
// `prometheus`, which provides promtool), so they are not part of `npm test`.

export default suiteConfig(['test/prometheus/**/*.spec.ts'], { testTimeout: 60_000 });
