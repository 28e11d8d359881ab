import type { EngineStats, QueueStats, Throughput } from '../../engine/index.js';
import { html, nothing, type Html } from '../dashboard.html.js';
import { DASHBOARD_REFRESHES_MAX } from '../dashboard.options.js';
import { badge, count, duration, flash, href, layout, queuePath, sparkline, type ViewContext } from './layout.view.js';

/**
 * Sections a queue shows only when its feature is in use: flow control (limits, groups: `flow`)
 * and flows held by a dead child (`blockedFlows`); a queue without them shows nothing. The queues
 * page and the queue page both render these.
 */
export function featureSections(queue: QueueStats): Html[] {
  const sections: Html[] = [];
  const flow = queue.flow;
  if (flow) {
    const { limits } = flow;
    const rate = (r: { limit: number; windowMs: number } | null) => (r ? `${count(r.limit)} per ${duration(r.windowMs)}` : 'none');
    sections.push(html`<div class="flow" data-testid="flow-control"><strong>Flow control</strong>
<dl class="facts">
<dt>Running (all processes)</dt><dd>${count(flow.running)}${limits.globalConcurrency === null ? nothing : html` of ${count(limits.globalConcurrency)}`}</dd>
<dt>Per group</dt><dd>${limits.groupConcurrency === null ? 'no limit' : `at most ${count(limits.groupConcurrency)} running`}</dd>
<dt>Rate limit</dt><dd>${rate(limits.rateLimit)}${flow.claimsInWindow === null ? nothing : html` (${count(flow.claimsInWindow)} in the window)`}</dd>
<dt>Per-group rate limit</dt><dd>${rate(limits.groupRateLimit)}</dd>
<dt>Fair between groups</dt><dd>${limits.groupFairness ? 'yes' : 'no'}</dd>
<dt>Held by a rate limit or throttle</dt><dd>${count(flow.heldByRateLimit)}${flow.throttledUntil ? html` (queue throttled until ${flow.throttledUntil.toISOString().slice(11, 19)} UTC)` : nothing}</dd>
<dt>Groups with work</dt><dd>${count(flow.groupCount)}</dd>
</dl>${flow.topGroups.length === 0 ? nothing : html`<div class="scroll"><table>
<caption>Groups with the most jobs (top ${count(flow.topGroups.length)})</caption>
<thead><tr><th scope="col">Group</th><th scope="col" class="num">Running</th><th scope="col" class="num">Waiting</th><th scope="col" class="num">Limit</th><th scope="col">Throttled until</th></tr></thead>
<tbody>${flow.topGroups.map((g) => html`<tr><td>${g.group}</td><td class="num">${count(g.running)}</td><td class="num">${count(g.waiting)}</td>
<td class="num">${g.concurrency === null ? '—' : count(g.concurrency)}</td><td>${g.throttledUntil ? `${g.throttledUntil.toISOString().slice(11, 19)} UTC` : '—'}</td></tr>`)}</tbody>
</table></div>`}</div>`);
  }
  if (queue.blockedFlows > 0) {
    sections.push(html`<p class="flow" data-testid="blocked-flows"><strong>${count(queue.blockedFlows)}</strong> flow parent${queue.blockedFlows === 1 ? '' : 's'} held by a dead child: replay or discard the child (see the dead jobs).</p>`);
  }
  return sections;
}

/** The live part of the queues page: refreshed by htmx every refreshMs, at most DASHBOARD_REFRESHES_MAX times per page load. */
export function queuesLive(ctx: ViewContext, stats: EngineStats, throughput: Throughput, refreshes: number): Html {
  const spark = new Map(throughput.queues.map((q) => [q.queue, q]));
  const zeros = throughput.total.succeeded.map(() => 0);
  const minutes = Math.round(throughput.windowMs / 60_000);
  const bucket = duration(throughput.bucketMs);
  const more = refreshes < DASHBOARD_REFRESHES_MAX;
  const poll = more
    ? html` hx-get="${href(ctx, '/live', { n: refreshes + 1 })}" hx-trigger="every ${ctx.refreshMs}ms" hx-swap="outerHTML"`
    : nothing;
  const rows = stats.queues.map((q) => {
    const t = spark.get(q.queue);
    return html`<tr>
  <th scope="row"><a href="${href(ctx, queuePath(q.queue))}">${q.queue}</a> ${q.paused ? badge('paused') : nothing}</th>
  <td class="num">${count(q.counts.scheduled)}</td>
  <td class="num">${count(q.counts.pending)}</td>
  <td class="num">${count(q.counts.running)}</td>
  <td class="num">${q.counts.dead ? html`<a href="${href(ctx, `${queuePath(q.queue)}/dead`)}">${count(q.counts.dead)}</a>` : '0'}</td>
  <td class="num">${count(q.counts.recent.succeeded)}</td>
  <td class="num">${duration(q.oldestClaimableAgeMs)}</td>
  <td>${sparkline(t?.succeeded ?? zeros, t?.dead ?? zeros, `${q.queue}, last ${minutes} min per ${bucket}`)}</td>
  ${q.slots ? html`<td class="num">${q.slots.busy}/${q.slots.total}</td>` : html`<td class="muted">—</td>`}
  <td>${q.paused
    ? html`<a class="button primary" href="${href(ctx, '/confirm', { action: 'resume', queue: q.queue })}">Resume…</a>`
    : html`<a class="button" href="${href(ctx, '/confirm', { action: 'pause', queue: q.queue })}">Pause…</a>`}</td>
</tr>${featureSections(q).length ? html`<tr><td colspan="10">${featureSections(q)}</td></tr>` : nothing}`;
  });
  const totalSucceeded = throughput.total.succeeded.reduce((a, b) => a + b, 0);
  return html`<section id="live" aria-live="polite" aria-busy="false"${poll}>
<div class="scroll"><table>
<caption>Counts from the database (every process), ${stats.at.toISOString().slice(11, 19)} UTC; "recently succeeded": the last ${duration(stats.recentWindowMs)}.</caption>
<thead><tr><th scope="col">Queue</th><th scope="col" class="num">Scheduled</th><th scope="col" class="num">Pending</th><th scope="col" class="num">Running</th>
<th scope="col" class="num">Dead</th><th scope="col" class="num">Recently succeeded</th><th scope="col" class="num">Oldest claimable</th>
<th scope="col">Last ${minutes} min</th><th scope="col" class="num">Slots here</th><th scope="col">Action</th></tr></thead>
<tbody>${rows.length ? rows : html`<tr><td colspan="10" class="muted">No queue is declared yet.</td></tr>`}</tbody>
</table></div>
<p class="small muted">Throughput of the whole cluster: ${count(totalSucceeded)} job${totalSucceeded === 1 ? '' : 's'} succeeded in the last ${minutes} min
${sparkline(throughput.total.succeeded, throughput.total.dead, `All queues, last ${minutes} min per ${bucket}`)}
${throughput.completeForMs !== null ? html` (more finished than one read counts: complete for the last ${duration(throughput.completeForMs)} only)` : nothing}.
Listener ${stats.listener.listening ? 'listening' : html`<strong>down for ${duration(stats.listener.downForMs)}</strong>`};
pool ${stats.pool.total} open, ${stats.pool.waiting} waiting; database ${stats.database.connections} connections, ${stats.database.lockWaits} waiting on locks.
${more ? html`Refreshes every ${duration(ctx.refreshMs)}.` : html`<strong>Live refresh stopped</strong> after ${DASHBOARD_REFRESHES_MAX} updates: <a href="${ctx.base}/">reload to resume</a>.`}</p>
</section>`;
}

export function queuesPage(ctx: ViewContext, stats: EngineStats, throughput: Throughput, notice?: string): Html {
  return layout(
    ctx,
    'Queues',
    html`<h1>Queues</h1>${flash(notice)}
${queuesLive(ctx, stats, throughput, 0)}`,
  );
}
