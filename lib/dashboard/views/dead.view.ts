import type { DeadErrorGroup, DeadJobPage, JobSummary, QueueStats } from '../../engine/index.js';
import { html, nothing, type Html } from '../dashboard.html.js';
import { count, flash, href, layout, moment, queuePath, type ViewContext } from './layout.view.js';
import { jobRows, jobTableHead } from './queue.view.js';

export interface DeadPageData {
  stats: QueueStats;
  groups: DeadErrorGroup[];
  errorCode: string | undefined;
  cursor: string | undefined;
  page: DeadJobPage;
  limit: number;
}

const summary = (j: DeadJobPage['jobs'][number]): JobSummary => ({
  id: j.id,
  status: 'dead',
  priority: j.priority,
  attemptCount: j.attemptCount,
  maxAttempts: j.maxAttempts,
  lastErrorCode: j.lastErrorCode,
  lastErrorMessage: j.lastErrorMessage,
  orderingKey: null,
  leaseOwner: null,
  leaseExpiresAt: null,
  availableAt: j.finishedAt,
  createdAt: j.createdAt,
  finishedAt: j.finishedAt,
});

export function deadPage(ctx: ViewContext, data: DeadPageData, notice?: string): Html {
  const q = data.stats;
  const base = `${queuePath(q.queue)}/dead`;
  const groups = data.groups.map(
    (g) => html`<tr>
  <th scope="row">${g.errorCode === null ? html`<span class="muted">no code</span>` : html`<a href="${href(ctx, base, { code: g.errorCode })}"><code>${g.errorCode}</code></a>`}</th>
  <td class="num">${count(g.count)}</td>
  <td>${moment(g.oldestAt)}</td>
  <td>${moment(g.newestAt)}</td>
  <td class="wrap">${g.lastMessage ?? ''}</td>
  <td>${g.errorCode === null
    ? nothing
    : html`<a class="button primary" href="${href(ctx, '/confirm', { action: 'replay-code', queue: q.queue, code: g.errorCode })}">Replay all ${count(g.count)}…</a>`}</td>
</tr>`,
  );
  const next = data.page.nextCursor;
  const body = html`<h1>Dead jobs of <a href="${href(ctx, queuePath(q.queue))}">${q.queue}</a></h1>${flash(notice)}
<p>${count(q.counts.dead)} dead. They stay until someone replays, discards or purges them: fix the cause, then replay.</p>
<h2>By error code</h2>
<div class="scroll"><table>
<caption>Most jobs first</caption>
<thead><tr><th scope="col">Error code</th><th scope="col" class="num">Jobs</th><th scope="col">Oldest death</th><th scope="col">Newest death</th><th scope="col" class="wrap">Newest message</th><th scope="col">Action</th></tr></thead>
<tbody>${groups.length ? groups : html`<tr><td colspan="6" class="muted">No dead jobs.</td></tr>`}</tbody>
</table></div>
<h2 id="list">${data.errorCode ? html`Dead jobs with code <code>${data.errorCode}</code>` : 'All dead jobs'}</h2>
<p>${data.errorCode ? html`<a href="${href(ctx, base)}">Show every code</a>` : nothing}</p>
<form method="get" action="${ctx.base}/confirm">
<input type="hidden" name="action" value="replay-selected">
<input type="hidden" name="queue" value="${q.queue}">
<div class="scroll"><table>
<caption>Oldest death first, ${data.limit} per page${data.cursor ? ' (a later page)' : ''}</caption>
${jobTableHead(true)}
<tbody data-testid="dead-rows">${data.page.jobs.length ? jobRows(ctx, data.page.jobs.map(summary), { select: true }) : html`<tr><td colspan="8" class="muted">None.</td></tr>`}</tbody>
</table></div>
<div class="actions"><button type="submit" class="primary">Replay selected…</button></div>
</form>
<nav class="pager" aria-label="Pages">
  ${data.cursor ? html`<a href="${href(ctx, base, { code: data.errorCode, limit: data.limit })}">First page</a>` : nothing}
  ${next ? html`<a rel="next" href="${href(ctx, base, { code: data.errorCode, cursor: next, limit: data.limit })}">Next page →</a>` : nothing}
</nav>
<h2>Purge</h2>
<form class="filters" method="get" action="${ctx.base}/confirm">
  <input type="hidden" name="action" value="purge">
  <input type="hidden" name="queue" value="${q.queue}">
  <div><label for="days">Delete this queue's dead jobs that died more than … days ago</label><input id="days" name="days" type="number" min="0" max="36500" value="30" required></div>
  <div><button type="submit" class="danger">Purge…</button></div>
</form>`;
  return layout(ctx, `Dead jobs of ${q.queue}`, body);
}
