// One process that runs the real migrator, compiled to JavaScript by test/migrator.spec.ts (which
// starts ten of these at once against one database).
//
//   node migrate-child.mjs <compiled migrator.js> <database url> <migrate options as JSON>
//
// Prints "ready" once the migrator is loaded, calls migrate() when a line arrives on stdin (so the
// parent can release all children together), then prints one JSON line with the report or error.
import { pathToFileURL } from 'node:url';

const [modulePath, url, optionsJson] = process.argv.slice(2);
const { migrate } = await import(pathToFileURL(modulePath).href);

process.stdout.write('ready\n');
await new Promise((resolve) => process.stdin.once('data', resolve));
process.stdin.destroy();

try {
  const report = await migrate(url, JSON.parse(optionsJson));
  process.stdout.write(`${JSON.stringify({ ok: true, report })}\n`);
} catch (error) {
  process.stdout.write(`${JSON.stringify({ ok: false, name: error?.name, code: error?.code, message: String(error?.message ?? error) })}\n`);
  process.exitCode = 1;
}
