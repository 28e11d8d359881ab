import type { BrowsableStatus, JobPage, JobSummary, QueueAuditRecord, QueueStats, ScheduleRecord } from '../../engine/index.js';
import { html, nothing, type Html } from '../dashboard.html.js';
import { DASHBOARD_REFRESHES_MAX } from '../dashboard.options.js';
import { featureSections } from './queues.view.js';
import { badge, count, duration, flash, href, jobPath, layout, moment, queuePath, type ViewContext } from './layout.view.js';

export const STATE_TABS: readonly BrowsableStatus[] = ['pending', 'scheduled', 'running', 'dead', 'succeeded', 'cancelled'];

export interface QueuePageData {
  stats: QueueStats;
  state: BrowsableStatus;
  errorCode: string | undefined;
  cursor: string | undefined;
  page: JobPage;
  audit: QueueAuditRecord[];
  /** Its recurring schedules (the first 100 by name): none for a queue without. */
  schedules: ScheduleRecord[];
}

/** The queue's recurring schedules: next and last tick, ticks run, missed and skipped, paused. */
function schedulesSection(ctx: ViewContext, schedules: readonly ScheduleRecord[]): Html {
  if (schedules.length === 0) return nothing;
  return html`<h2 id="schedules">Schedules</h2>
<div class="scroll"><table data-testid="schedules">
<caption>Recurring schedules of this queue (docs/recurring-jobs.md)${schedules.length === 100 ? ', the first 100' : ''}</caption>
<thead><tr><th scope="col">Schedule</th><th scope="col">Cron</th><th scope="col">Next tick</th><th scope="col">Last tick</th>
<th scope="col" class="num">Run</th><th scope="col" class="num">Missed</th><th scope="col" class="num">Skipped</th><th scope="col">State</th></tr></thead>
<tbody>${schedules.map((r) => html`<tr><td>${r.name} <span class="muted small">${r.source}</span></td><td><code>${r.cron}</code> ${r.tz}</td>
<td>${moment(r.nextTickAt)}${r.lateMs > 0 ? html` ${badge(`late ${duration(r.lateMs)}`, 'dead')}` : nothing}</td><td>${moment(r.lastTickAt)}</td>
<td class="num">${count(r.ticks.run)}</td><td class="num">${count(r.ticks.missed)}</td><td class="num">${count(r.ticks.skipped)}</td>
<td>${r.paused ? badge(r.pausedReason === 'removed' ? 'paused (removed from code)' : 'paused', 'paused') : badge('active', 'running')}</td></tr>`)}</tbody>
</table></div>`;
}

/** The queue's counts, refreshed as the queues page's are. */
export function queueCounts(ctx: ViewContext, q: QueueStats, refreshes: number): Html {
  const poll =
    refreshes < DASHBOARD_REFRESHES_MAX
      ? html` hx-get="${href(ctx, `${queuePath(q.queue)}/live`, { n: refreshes + 1 })}" hx-trigger="every ${ctx.refreshMs}ms" hx-swap="outerHTML"`
      : nothing;
  return html`<section id="counts" aria-live="polite"${poll}>
<dl class="facts">
  <dt>State</dt><dd data-testid="queue-state">${q.paused ? html`${badge('paused')} since ${moment(q.pausedAt)}` : badge('claiming', 'ok')}</dd>
  <dt>Scheduled</dt><dd>${count(q.counts.scheduled)}</dd>
  <dt>Pending</dt><dd data-testid="pending-count">${count(q.counts.pending)}</dd>
  <dt>Running</dt><dd>${count(q.counts.running)}${q.runningNearExpiry ? html` (${q.runningNearExpiry} near lease expiry)` : nothing}</dd>
  <dt>Dead</dt><dd>${count(q.counts.dead)}${q.oldestDeadAgeMs !== null ? html`, oldest died ${duration(q.oldestDeadAgeMs)} ago` : nothing}${q.blockedKeys ? html`; ${q.blockedKeys} ordering keys blocked` : nothing}</dd>
  <dt>Recently finished</dt><dd>${count(q.counts.recent.succeeded)} succeeded, ${count(q.counts.recent.cancelled)} cancelled</dd>
  <dt>Oldest claimable</dt><dd>${duration(q.oldestClaimableAgeMs)}</dd>
  ${q.slots ? html`<dt>Slots in this process</dt><dd>${q.slots.busy} busy of ${q.slots.total}</dd>` : nothing}
</dl>
</section>`;
}

function stateCount(q: QueueStats, state: BrowsableStatus): string {
  if (state === 'succeeded' || state === 'cancelled') return `${count(q.counts.recent[state])} recent`;
  return count(q.counts[state]);
}

export function jobRows(ctx: ViewContext, jobs: readonly JobSummary[], options: { select?: boolean } = {}): Html {
  return html`${jobs.map(
    (j) => html`<tr>
  ${options.select ? html`<td><input type="checkbox" name="ids" value="${j.id}" id="pick-${j.id}" aria-label="Select job ${j.id}"></td>` : nothing}
  <th scope="row"><a href="${href(ctx, jobPath(j.id))}">#${j.id}</a></th>
  <td>${badge(j.status)}</td>
  <td class="num">${j.attemptCount}${j.maxAttempts !== null ? `/${j.maxAttempts}` : ''}</td>
  <td class="num">${j.priority}</td>
  <td>${j.status === 'running' ? html`lease ends ${moment(j.leaseExpiresAt)}` : j.finishedAt ? html`finished ${moment(j.finishedAt)}` : html`due ${moment(j.availableAt)}`}</td>
  <td>${j.lastErrorCode ? html`<code>${j.lastErrorCode}</code>` : nothing}</td>
  <td class="wrap">${j.lastErrorMessage ?? ''}</td>
</tr>`,
  )}`;
}

export function jobTableHead(select = false): Html {
  return html`<thead><tr>${select ? html`<th scope="col"><span class="muted">Pick</span></th>` : nothing}<th scope="col">Job</th><th scope="col">State</th><th scope="col" class="num">Attempts</th>
<th scope="col" class="num">Priority</th><th scope="col">When</th><th scope="col">Error code</th><th scope="col" class="wrap">Last error</th></tr></thead>`;
}

export function queuePage(ctx: ViewContext, data: QueuePageData, notice?: string): Html {
  const q = data.stats;
  const base = queuePath(q.queue);
  const tabs = STATE_TABS.map(
    (state) =>
      html`<li><a href="${href(ctx, base, { state })}"${state === data.state ? html` aria-current="page"` : nothing}>${state} <span class="small">(${stateCount(q, state)})</span></a></li>`,
  );
  const next = data.page.nextCursor;
  const body = html`<h1>Queue ${q.queue}</h1>${flash(notice)}
${queueCounts(ctx, q, 0)}
<div class="actions">
  ${q.paused
    ? html`<a class="button primary" href="${href(ctx, '/confirm', { action: 'resume', queue: q.queue })}">Resume…</a>`
    : html`<a class="button" href="${href(ctx, '/confirm', { action: 'pause', queue: q.queue })}">Pause…</a>`}
  <a class="button" href="${href(ctx, `${base}/dead`)}">Dead jobs by error code (${count(q.counts.dead)})</a>
</div>
${featureSections(q)}
${schedulesSection(ctx, data.schedules)}
<h2 id="jobs">Jobs</h2>
<nav aria-label="Job states"><ul class="tabs">${tabs}</ul></nav>
<form class="filters" method="get" action="${href(ctx, base)}">
  <input type="hidden" name="state" value="${data.state}">
  <div><label for="code">Error code</label><input id="code" name="code" value="${data.errorCode ?? ''}" maxlength="64" placeholder="any"></div>
  <div><button type="submit">Filter</button></div>
</form>
<form class="filters" method="get" action="${ctx.base}/jobs">
  <div><label for="job-id">Go to job id</label><input id="job-id" name="id" inputmode="numeric" pattern="[0-9]{1,19}" required></div>
  <div><button type="submit">Open</button></div>
</form>
<div class="scroll"><table>
<caption>${data.state} jobs of ${q.queue}${data.errorCode ? html` with code <code>${data.errorCode}</code>` : nothing}, ${
    data.state === 'pending' ? 'oldest due first (jobs waiting for their ordering key are not claimable and not listed)' : data.state === 'scheduled' ? 'soonest first' : data.state === 'running' ? 'soonest lease expiry first' : 'newest first'
  }${data.cursor ? ' (a later page)' : ''}</caption>
${jobTableHead()}
<tbody>${data.page.jobs.length ? jobRows(ctx, data.page.jobs) : html`<tr><td colspan="7" class="muted">${data.page.walkedOut ? 'None in this stretch: continue below.' : 'None.'}</td></tr>`}</tbody>
</table></div>
<nav class="pager" aria-label="Pages">
  ${data.cursor ? html`<a href="${href(ctx, base, { state: data.state, code: data.errorCode })}">First page</a>` : nothing}
  ${next ? html`<a rel="next" href="${href(ctx, base, { state: data.state, code: data.errorCode, cursor: next })}">${data.page.walkedOut ? 'Continue the search →' : 'Next page →'}</a>` : nothing}
</nav>
${data.page.walkedOut ? html`<p class="small muted">This page read as many jobs as one page may (of every queue's ${data.state} jobs) before it was full.</p>` : nothing}
<h2>Pauses and resumes</h2>
${data.audit.length
  ? html`<div class="scroll"><table><caption>Newest first</caption><thead><tr><th scope="col">When</th><th scope="col">What</th><th scope="col">Who</th><th scope="col" class="wrap">Why</th></tr></thead><tbody>${data.audit.map(
      (a) => html`<tr><td>${moment(a.at)}</td><td>${a.kind}${a.wasPaused === (a.kind === 'paused') ? html` <span class="muted">(already ${a.wasPaused ? 'paused' : 'claiming'})</span>` : nothing}</td><td>${a.actor ?? html`<span class="muted">—</span>`}</td><td class="wrap">${a.reason ?? ''}</td></tr>`,
    )}</tbody></table></div>`
  : html`<p class="muted">Never paused (since the audit trail began, migration 0011).</p>`}`;
  return layout(ctx, `Queue ${q.queue}`, body);
}
