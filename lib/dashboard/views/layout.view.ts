import { html, nothing, type Html } from '../dashboard.html.js';

/** What every page knows of its request. */
export interface ViewContext {
  /** The dashboard's absolute path, with the application's global prefix (`/api/pg-queue`). */
  readonly base: string;
  readonly actor: string | undefined;
  /** The request's form token (see dashboard.security.ts), put in every form that acts. */
  readonly csrf: string;
  readonly notice: string | undefined;
  readonly refreshMs: number;
}

/** A link inside the dashboard: `path` under the base, query values encoded (undefined ones left out). */
export function href(ctx: ViewContext, path: string, query: Record<string, string | number | undefined | readonly string[]> = {}): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined || value === '') continue;
    if (Array.isArray(value)) for (const v of value) params.append(key, v);
    else params.append(key, String(value));
  }
  const search = params.toString();
  return `${ctx.base}${path}${search ? `?${search}` : ''}`;
}

/** `/queues/<name>` with the name encoded (names may hold `:` and `.`). */
export const queuePath = (queue: string) => `/queues/${encodeURIComponent(queue)}`;
export const jobPath = (id: string) => `/jobs/${encodeURIComponent(id)}`;

/** The hidden form token every acting form carries. */
export function csrfField(ctx: ViewContext): Html {
  return html`<input type="hidden" name="_csrf" value="${ctx.csrf}">`;
}

/** The page around a body: one stylesheet and one script, both the module's own (the CSP allows nothing else). */
export function layout(ctx: ViewContext, title: string, body: Html, options: { status?: Html } = {}): Html {
  // htmx's own options, read from this meta tag: nothing that would need 'unsafe-eval' or inline styles.
  const htmxConfig = JSON.stringify({ includeIndicatorStyles: false, allowEval: false, allowScriptTags: false, selfRequestsOnly: true, historyCacheSize: 0 });
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="htmx-config" content="${htmxConfig}">
<meta name="referrer" content="same-origin">
<title>${title} · pg-queue</title>
<link rel="stylesheet" href="${ctx.base}/assets/dashboard.css">
<script src="${ctx.base}/assets/htmx.min.js" defer></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="top">
  <a class="brand" href="${ctx.base}/">pg-queue</a>
  <nav aria-label="Dashboard"><a href="${ctx.base}/">Queues</a></nav>
  <span class="who">${ctx.actor === undefined ? 'not signed in: you may look, not act' : html`signed in as <strong>${ctx.actor}</strong>`}</span>
</header>
${ctx.notice ? html`<div class="notice" role="note">${ctx.notice}</div>` : nothing}
<main id="main">
${options.status ?? nothing}
${body}
</main>
</body>
</html>`;
}

/** A short human duration: 850 ms, 12 s, 4 min 10 s, 3 h 5 min, 2 d 4 h. */
export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '—';
  const abs = Math.max(0, ms);
  if (abs < 1_000) return `${Math.round(abs)} ms`;
  const s = Math.floor(abs / 1_000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
  const d = Math.floor(h / 24);
  return h % 24 ? `${d} d ${h % 24} h` : `${d} d`;
}

/** A moment as a <time> element: ISO for machines and screen readers' exactness, "… ago" or "in …" for people. */
export function moment(at: Date | null | undefined, now: Date = new Date()): Html {
  if (!at) return html`<span class="muted">—</span>`;
  const delta = at.getTime() - now.getTime();
  const words = Math.abs(delta) < 1_000 ? 'now' : delta < 0 ? `${duration(-delta)} ago` : `in ${duration(delta)}`;
  return html`<time datetime="${at.toISOString()}" title="${at.toISOString()}">${words}</time>`;
}

export function badge(text: string, kind: string = text): Html {
  return html`<span class="badge ${kind}">${text}</span>`;
}

export function count(n: number): string {
  return n.toLocaleString('en-US');
}

/**
 * A sparkline of succeeded (and dead) jobs per bucket, oldest first, as inline SVG: attributes
 * only (a strict CSP allows no inline style), with a text equivalent for screen readers.
 */
export function sparkline(succeeded: readonly number[], dead: readonly number[], label: string): Html {
  const width = 120;
  const height = 28;
  const max = Math.max(1, ...succeeded, ...dead);
  const points = (values: readonly number[]) =>
    values.map((v, i) => `${((i / Math.max(1, values.length - 1)) * width).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`).join(' ');
  const total = succeeded.reduce((a, b) => a + b, 0);
  const died = dead.reduce((a, b) => a + b, 0);
  const text = `${label}: ${count(total)} succeeded${died ? `, ${count(died)} died` : ''}; busiest bucket ${count(Math.max(0, ...succeeded))}`;
  return html`<svg class="spark" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="${text}"><title>${text}</title><line x1="0" y1="${height - 1}" x2="${width}" y2="${height - 1}"></line><polyline points="${points(succeeded)}"></polyline>${died ? html`<polyline class="dead" points="${points(dead)}"></polyline>` : nothing}</svg>`;
}

/** The queue's own message of a refused action (or of a failed read), with its code. */
export function problem(error: { code?: string; message: string }): Html {
  return html`<div class="error" role="alert"><strong>Refused${error.code ? html` (<code>${error.code}</code>)` : nothing}:</strong> ${error.message}</div>`;
}

export function flash(text: string | undefined): Html {
  return text ? html`<div class="flash" role="status">${text}</div>` : nothing;
}
