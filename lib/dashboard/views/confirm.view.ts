import { html, nothing, type Html } from '../dashboard.html.js';
import { count, csrfField, layout, problem, type ViewContext } from './layout.view.js';

/** What a confirmation page asks about: the question, what it will do, the form's fields, and where "back" goes. */
export interface Confirmation {
  action: string;
  title: string;
  /** What will happen, in a sentence or two. */
  effect: Html;
  /** Submitted with the reason: the action's targets. */
  fields: Record<string, string | readonly string[]>;
  submit: string;
  danger?: boolean;
  back: string;
}

function hidden(fields: Confirmation['fields']): Html[] {
  return Object.entries(fields).flatMap(([name, value]) =>
    (Array.isArray(value) ? value : [value as string]).map((v) => html`<input type="hidden" name="${name}" value="${v}">`),
  );
}

/** Every action asks for a reason (recorded with it) and is confirmed by a second, explicit submit. */
export function confirmPage(ctx: ViewContext, c: Confirmation, options: { error?: { code?: string; message: string }; reason?: string } = {}): Html {
  const body = html`<h1>${c.title}</h1>
${options.error ? problem(options.error) : nothing}
<p>${c.effect}</p>
${ctx.actor === undefined
  ? html`<p class="error" role="alert">You are not signed in as anyone: the dashboard records who asked for every action, so it cannot act for you.</p>`
  : html`<form method="post" action="${ctx.base}/actions/${c.action}">
${csrfField(ctx)}
${hidden(c.fields)}
<p><label for="reason">Reason (recorded with the action, as done by ${ctx.actor})</label>
<textarea id="reason" name="reason" required maxlength="1000" aria-describedby="reason-help">${options.reason ?? ''}</textarea>
<span id="reason-help" class="small muted">Say why, for whoever reads the history later.</span></p>
<div class="actions"><button type="submit" class="${c.danger ? 'danger' : 'primary'}">${c.submit}</button> <a class="button" href="${c.back}">Back</a></div>
</form>`}`;
  return layout(ctx, c.title, body);
}

export interface ReplayProgress {
  queue: string;
  code: string;
  /** Jobs of the code that died at or before this moment are replayed; one that died again after is not. */
  bound: string;
  total: number;
  done: number;
  reason: string;
  finished: boolean;
  back: string;
}

/**
 * Replaying every dead job of a code, one bounded batch per request: with htmx the next batch is
 * asked for as soon as this answer is shown (hx-trigger="load"), without it a button does it.
 * Each request is one batch, so any instance of the application can serve the next.
 */
export function replayProgress(ctx: ViewContext, p: ReplayProgress): Html {
  const status = p.finished ? `Done: replayed ${count(p.done)} of ${count(p.total)}.` : `Replayed ${count(p.done)} of ${count(p.total)}…`;
  return html`<section id="progress" aria-live="polite">
<progress max="${Math.max(p.total, p.done, 1)}" value="${p.done}" aria-label="Jobs replayed"></progress>
<p data-testid="progress-text">${status}</p>
${p.finished
  ? html`<p><a href="${p.back}">Back to the dead jobs</a></p>`
  : html`<form method="post" action="${ctx.base}/actions/replay-code" hx-post="${ctx.base}/actions/replay-code" hx-trigger="load delay:50ms" hx-target="#progress" hx-swap="outerHTML">
${csrfField(ctx)}
${hidden({ queue: p.queue, code: p.code, bound: p.bound, total: String(p.total), done: String(p.done), reason: p.reason })}
<div class="actions"><button type="submit">Continue</button> <a class="button" href="${p.back}">Stop</a></div>
</form>`}
</section>`;
}

export function progressPage(ctx: ViewContext, p: ReplayProgress): Html {
  return layout(ctx, `Replaying ${p.code}`, html`<h1>Replaying the dead jobs of ${p.queue} with code <code>${p.code}</code></h1>${replayProgress(ctx, p)}`);
}

/** A page that says no: refused by the guard, a cross-site action, no such job. */
export function refusalPage(ctx: ViewContext, title: string, message: string, signInUrl?: string): Html {
  return layout(ctx, title, html`<h1>${title}</h1><p class="error" role="alert">${message}</p>${signInUrl ? html`<p><a class="button primary" href="${signInUrl}">Sign in</a></p>` : nothing}`);
}
