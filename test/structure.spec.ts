import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import ts from 'typescript';

/**
 * The shape of lib/ that no other test defends: checks of the source itself, by its syntax tree
 * (the TypeScript compiler's, so comments and identifiers never count; only what the code holds).
 */

const ROOT = join(import.meta.dirname, '..');
const LIB = join(ROOT, 'lib');
/** The only code that holds SQL text (and the positional `$n` that goes with it). */
const STORE = join('lib', 'engine', 'store') + sep;

/**
 * SQL, as this code base writes it (keywords in capitals): a statement's opening words, or a
 * clause no prose has. Case-sensitive on purpose, so a message that says "select a queue" passes.
 */
export const SQL_TEXT =
  /\b(?:SELECT\s|INSERT\s+INTO\b|UPDATE\s+\S+(?:\s+AS\s+\w+)?\s+SET\b|DELETE\s+FROM\b|WITH\s+\w+\s+AS\s*\(|LISTEN\s+(?:"|\$\{)|CREATE\s+(?:TABLE|SCHEMA|INDEX)\b|SET\s+LOCAL\b|SAVEPOINT\s|pg_notify\(|FOR\s+UPDATE\b|ON\s+CONFLICT\b)/;
/** A positional parameter: `$1`, `$2::bigint`. */
export const POSITIONAL = /\$\d+\b/;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts') ? [path] : [];
  });
}

/** Every string and template literal of a file, with its line: a template's literal parts joined by `${…}`. */
export function literalsOf(fileName: string, text: string): { line: number; text: string }[] {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const found: { line: number; text: string }[] = [];
  const visit = (node: ts.Node): void => {
    let literal: string | undefined;
    if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) literal = node.text;
    else if (ts.isTemplateExpression(node)) literal = [node.head.text, ...node.templateSpans.map((span) => span.literal.text)].join('${…}');
    if (literal !== undefined) found.push({ line: source.getLineAndCharacterOfPosition(node.getStart()).line + 1, text: literal });
    // A template's own spans are read above; the expressions inside them are visited too (nested literals).
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** The literals of lib/ outside the store that match `pattern`, as "file:line: text". */
function offenders(pattern: RegExp): string[] {
  return sourceFiles(LIB)
    .map((path) => relative(ROOT, path))
    .filter((path) => !path.startsWith(STORE))
    .flatMap((path) =>
      literalsOf(path, readFileSync(join(ROOT, path), 'utf8'))
        .filter((literal) => pattern.test(literal.text))
        .map((literal) => `${path}:${literal.line}: ${literal.text.replace(/\s+/g, ' ').slice(0, 80)}`),
    );
}

test('no string literal outside lib/engine/store/ holds SQL', () => {
  expect(offenders(SQL_TEXT)).toEqual([]);
});

test('no string literal outside lib/engine/store/ holds a positional parameter ($n)', () => {
  expect(offenders(POSITIONAL)).toEqual([]);
});

test('the detector finds SQL in every kind of literal, and not in comments or prose', () => {
  const sample = [
    "const a = 'SELECT 1';",
    'const b = `UPDATE ${t} AS j SET status = $1`;',
    'const c = `WITH moved AS (\n  DELETE FROM x RETURNING id\n) SELECT 1`;',
    'const d = f(`LISTEN ${channel}`);',
    '// SELECT * FROM jobs in a comment',
    "const e = 'Select a queue, then insert into it: an update sets nothing.';",
  ].join('\n');
  const matched = literalsOf('sample.ts', sample).filter((literal) => SQL_TEXT.test(literal.text));
  // Lines: c spans 3-5, so d is on 6; the comment (7) and the prose (8) are not SQL.
  expect(matched.map((literal) => literal.line)).toEqual([1, 2, 3, 6]);
  expect(literalsOf('sample.ts', sample).filter((literal) => POSITIONAL.test(literal.text)).map((literal) => literal.line)).toEqual([2]);
});

test('the store holds the SQL: every statement it defines is found by the detector', async () => {
  const { createStore } = await import('../lib/engine/store/index.js');
  const { statements } = createStore('pgqueue');
  const unseen = Object.entries(statements).filter(([, statement]) => !SQL_TEXT.test(statement.text) && !/^SAVEPOINT/.test(statement.text));
  expect(unseen.map(([name]) => name)).toEqual([]);
});
