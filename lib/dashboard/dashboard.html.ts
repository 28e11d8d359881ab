/**
 * The dashboard's one template helper: `html` escapes every value it interpolates, so output is
 * escaped by construction. Queue names, error messages, actors, reasons, payloads are text that
 * whoever enqueues or fails a job controls; the only way to put markup into a page is another
 * `html` template (an `Html` value), never a string.
 */
export class Html {
  constructor(readonly text: string) {}

  toString(): string {
    return this.text;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

/** Text as HTML text or as a (quoted) attribute value: every character that could end either is replaced. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"'`]/g, (c) => ESCAPES[c]!);
}

/** A value in a template: markup as it is, a list item by item, nothing for null, undefined and false, anything else as escaped text. */
function render(value: unknown): string {
  if (value instanceof Html) return value.text;
  if (Array.isArray(value)) return value.map(render).join('');
  if (value === null || value === undefined || value === false) return '';
  return escapeHtml(String(value));
}

/** html`<p>${text}</p>`: the literal parts are markup, every `${value}` is escaped (unless it is Html). */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1]!;
  return new Html(out);
}

/** The empty fragment. */
export const nothing = new Html('');
