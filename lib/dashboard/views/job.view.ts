import type { ChildResult, JobEffectRecord, JobEventRecord, JobRecord } from '../../engine/index.js';
import { html, nothing, type Html } from '../dashboard.html.js';
import { badge, flash, href, jobPath, layout, moment, queuePath, type ViewContext } from './layout.view.js';

export interface JobPageData {
  job: JobRecord;
  history: JobEventRecord[];
  effects: JobEffectRecord[];
  showPayload: boolean;
  /** Its children in a flow (the first ones): empty for a job without. */
  children: ChildResult[];
}

/** A JSON value for a person, bounded so a large payload cannot make the page huge. */
function json(value: unknown, max = 100_000): string {
  const text = JSON.stringify(value, null, 2) ?? 'undefined';
  return text.length > max ? `${text.slice(0, max)}\n… (${text.length - max} more characters)` : text;
}

/**
 * The attempts as the history tells them: each exceptional transition names its attempt; the
 * happy path writes no row, so an attempt with no row is the one that succeeded (or the current one).
 */
function attempts(job: JobRecord, history: readonly JobEventRecord[]): Html {
  const byAttempt = new Map<number, JobEventRecord[]>();
  for (const event of history) {
    if (event.attempt === null || event.attempt === 0) continue;
    const list = byAttempt.get(event.attempt) ?? [];
    list.push(event);
    byAttempt.set(event.attempt, list);
  }
  const rows = [...byAttempt].sort(([a], [b]) => a - b);
  if (rows.length === 0 && job.attemptCount === 0) return html`<p class="muted">Not attempted yet.</p>`;
  return html`<div class="scroll"><table><caption>Attempts with an exceptional outcome (a retry, a lost lease, death); ${job.attemptCount} of ${job.maxAttempts ?? '—'} used now</caption>
<thead><tr><th scope="col" class="num">Attempt</th><th scope="col">Outcome</th><th scope="col">Error code</th><th scope="col" class="wrap">Error</th><th scope="col">Token</th><th scope="col">Worker</th></tr></thead>
<tbody>${rows.map(([attempt, events]) =>
    events.map(
      (e) => html`<tr><td class="num">${attempt}</td><td>${e.kind}</td><td>${e.errorCode ? html`<code>${e.errorCode}</code>` : nothing}</td><td class="wrap">${e.message ?? ''}</td><td>${e.leaseToken ?? ''}</td><td>${e.worker ?? ''}</td></tr>`,
    ),
  )}</tbody></table></div>`;
}

/** Its flow: the parent it waits in, and its children with their states (the parent's handler reads their results). */
function flowSection(ctx: ViewContext, job: JobRecord, children: readonly ChildResult[]): Html {
  if (job.parentId === null && children.length === 0) return nothing;
  const parent = job.parentId === null ? nothing : html`<p>Part of a flow: its parent is <a href="${href(ctx, jobPath(job.parentId))}" data-testid="flow-parent">job #${job.parentId}</a>, which runs once all its children have succeeded.</p>`;
  const list = children.length === 0
    ? nothing
    : html`<p>${job.awaitingChildren ? 'Waiting for its children' : 'Its children'}${children.length === 100 ? ' (the first 100)' : ''}:</p>
<div class="scroll"><table data-testid="flow-children"><thead><tr><th scope="col">Child</th><th scope="col">Queue</th><th scope="col">State</th></tr></thead>
<tbody>${children.map((c) => html`<tr><td><a href="${href(ctx, jobPath(c.id))}">#${c.id}</a></td><td>${c.queue}</td><td>${badge(c.discarded ? 'discarded' : c.status)}</td></tr>`)}</tbody></table></div>`;
  return html`<h2>Flow</h2>${parent}${list}`;
}

export function jobPage(ctx: ViewContext, data: JobPageData, notice?: string): Html {
  const { job } = data;
  const running = job.status === 'running';
  const act = (action: string, label: string, kind = '') => html`<a class="button ${kind}" href="${href(ctx, '/confirm', { action, id: job.id })}">${label}</a>`;
  const actions = [
    job.status === 'dead' ? act('replay', 'Replay…', 'primary') : nothing,
    job.status === 'dead' ? act('discard', 'Discard…', 'danger') : nothing,
    ['scheduled', 'pending', 'running'].includes(job.status) ? act('cancel', 'Cancel…', 'danger') : nothing,
  ];
  const body = html`<h1>Job #${job.id} ${badge(job.status)}</h1>${flash(notice)}
<dl class="facts">
  <dt>Queue</dt><dd><a href="${href(ctx, queuePath(job.queue))}">${job.queue}</a></dd>
  <dt>State</dt><dd data-testid="job-status">${job.status}</dd>
  <dt>Attempts</dt><dd>${job.attemptCount} of ${job.maxAttempts ?? 'the handler\'s maximum'}${job.releaseCount ? `, released ${job.releaseCount} time(s) at shutdown` : ''}</dd>
  <dt>Priority</dt><dd>${job.priority}</dd>
  <dt>Created</dt><dd>${moment(job.createdAt)}</dd>
  <dt>${job.status === 'scheduled' || job.status === 'pending' ? 'Due' : 'Last due'}</dt><dd>${moment(job.availableAt)}</dd>
  <dt>Finished</dt><dd>${moment(job.finishedAt)}</dd>
  <dt>Last error</dt><dd>${job.lastErrorCode ? html`<code>${job.lastErrorCode}</code> ` : nothing}${job.lastErrorMessage ?? html`<span class="muted">none</span>`}</dd>
</dl>
${running || (job.status === 'cancelled' && job.leaseExpiresAt !== null)
  ? html`<h2>Lease</h2>${running ? nothing : html`<p class="small muted">Cancelled while running: its attempt holds the lease until its worker confirms it ended.</p>`}<dl class="facts" data-testid="lease">
  <dt>Owner</dt><dd>${job.leaseOwner ?? '—'}</dd>
  <dt>Fencing token</dt><dd>${job.leaseToken}</dd>
  <dt>Claimed</dt><dd>${moment(job.claimedAt)}</dd>
  <dt>Last heartbeat</dt><dd>${moment(job.heartbeatAt)}</dd>
  <dt>Lease expires</dt><dd>${moment(job.leaseExpiresAt)}</dd>
  <dt>Deadline</dt><dd>${moment(job.deadlineAt)}</dd>
</dl>`
  : html`<p class="small muted">Fencing token ${job.leaseToken} (it only grows: one more per claim).</p>`}
<div class="actions">${actions}</div>
<h2>Payload</h2>
${data.showPayload ? html`<pre data-testid="payload">${json(job.payload)}</pre>` : html`<p class="muted">Hidden: the dashboard's <code>showPayload</code> option does not allow it for you.</p>`}
<h2>Attempts and errors</h2>
${attempts(job, data.history)}
${flowSection(ctx, job, data.children)}<h2>History</h2>
${data.history.length
  ? html`<div class="scroll"><table><caption>Every exceptional transition, oldest first (a claim and a success write none)</caption>
<thead><tr><th scope="col">When</th><th scope="col">What</th><th scope="col">From → to</th><th scope="col" class="num">Attempt</th><th scope="col">Who</th><th scope="col">Code</th><th scope="col" class="wrap">Message or reason</th></tr></thead>
<tbody>${data.history.map(
      (e) => html`<tr><td>${moment(e.at)}</td><td>${e.kind}</td><td>${e.fromStatus ?? '—'} → ${e.toStatus ?? '—'}</td><td class="num">${e.attempt ?? ''}</td><td>${e.actor ?? e.worker ?? ''}</td><td>${e.errorCode ? html`<code>${e.errorCode}</code>` : nothing}</td><td class="wrap">${e.message ?? ''}</td></tr>`,
    )}</tbody></table></div>`
  : html`<p class="muted">No exceptional transition.</p>`}
<h2>Effects</h2>
${data.effects.length
  ? html`<div class="scroll"><table><caption>Side effects recorded with ctx.effect</caption>
<thead><tr><th scope="col">Name</th><th scope="col">Status</th><th scope="col" class="num">Calls</th><th scope="col">Idempotency key</th><th scope="col">Started</th><th scope="col">Confirmed</th><th scope="col" class="wrap">Result</th></tr></thead>
<tbody>${data.effects.map(
      (e) => html`<tr><td>${e.name}</td><td>${e.status === 'started' ? badge('uncertain', 'scheduled') : badge('confirmed', 'ok')}</td><td class="num">${e.attempts}</td><td>${e.idempotencyKey}</td><td>${moment(e.startedAt)}</td><td>${moment(e.confirmedAt)}</td>
<td class="wrap">${data.showPayload ? (e.resultStored ? html`<code>${json(e.result, 2_000)}</code>` : html`<span class="muted">not stored</span>`) : html`<span class="muted">hidden</span>`}</td></tr>`,
    )}</tbody></table></div>`
  : html`<p class="muted">None.</p>`}`;
  return layout(ctx, `Job #${job.id}`, body);
}
