import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

/**
 * What the dashboard's pages load besides themselves, served by the module (no CDN, no fonts: a
 * strict Content-Security-Policy allows nothing else): htmx from its npm package, read once, and
 * the stylesheet below.
 */

let htmx: Buffer | undefined;

/** htmx's minified build, from the `htmx.org` package this one depends on. */
export function htmxScript(): Buffer {
  htmx ??= readFileSync(createRequire(import.meta.url).resolve('htmx.org/dist/htmx.min.js'));
  return htmx;
}

/** System fonts, a light and a dark scheme, tables that scroll sideways on a phone, visible focus. */
export const DASHBOARD_CSS = `
:root { color-scheme: light dark; --fg: #1b1f24; --muted: #57606a; --bg: #ffffff; --panel: #f6f8fa; --line: #d0d7de;
  --accent: #0b5cad; --ok: #1a7f37; --warn: #9a6700; --bad: #cf222e; --focus: #0969da; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --muted: #9da7b3; --bg: #0d1117; --panel: #161b22; --line: #30363d;
  --accent: #58a6ff; --ok: #3fb950; --warn: #d29922; --bad: #f85149; --focus: #58a6ff; } }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
a { color: var(--accent); }
a:focus-visible, button:focus-visible, input:focus-visible, select:focus-visible, textarea:focus-visible, summary:focus-visible {
  outline: 3px solid var(--focus); outline-offset: 2px; }
.skip { position: absolute; left: -999px; } .skip:focus { left: 8px; top: 8px; background: var(--bg); padding: 4px 8px; z-index: 2; }
header.top { display: flex; flex-wrap: wrap; gap: 8px 16px; align-items: baseline; padding: 10px 16px; border-bottom: 1px solid var(--line); background: var(--panel); }
header.top .brand { font-weight: 700; text-decoration: none; color: var(--fg); }
header.top nav a { margin-right: 12px; }
header.top .who { margin-left: auto; color: var(--muted); }
.notice { padding: 6px 16px; background: #fff8c5; color: #3b2e00; border-bottom: 1px solid #d4a72c; }
main { padding: 12px 16px 40px; max-width: 1200px; }
h1 { font-size: 1.4rem; margin: 8px 0 12px; } h2 { font-size: 1.1rem; margin: 24px 0 8px; }
.muted { color: var(--muted); } .small { font-size: 0.85rem; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; border: 1px solid var(--line); border-radius: 6px; }
table { border-collapse: collapse; width: 100%; }
caption { text-align: left; padding: 6px 8px; color: var(--muted); caption-side: top; }
th, td { text-align: left; padding: 6px 8px; border-top: 1px solid var(--line); vertical-align: top; white-space: nowrap; }
td.wrap, th.wrap { white-space: normal; word-break: break-word; min-width: 16rem; }
th { background: var(--panel); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 0 6px; border-radius: 10px; font-size: 0.8rem; border: 1px solid currentColor; }
.badge.paused, .badge.scheduled { color: var(--warn); } .badge.dead, .badge.bad { color: var(--bad); }
.badge.running, .badge.pending { color: var(--accent); } .badge.succeeded, .badge.ok { color: var(--ok); } .badge.cancelled { color: var(--muted); }
.spark { vertical-align: middle; } .spark polyline { fill: none; stroke: var(--ok); stroke-width: 1.5; } .spark .dead { stroke: var(--bad); }
.spark line { stroke: var(--line); }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; word-break: break-word; }
.actions { display: flex; flex-wrap: wrap; gap: 8px; margin: 12px 0; }
.button, button { display: inline-block; font: inherit; padding: 6px 12px; border-radius: 6px; border: 1px solid var(--line);
  background: var(--panel); color: var(--fg); text-decoration: none; cursor: pointer; min-height: 36px; }
.button.danger, button.danger { border-color: var(--bad); color: var(--bad); }
.button.primary, button.primary { border-color: var(--accent); color: var(--accent); }
form.inline { display: inline; }
form.filters { display: flex; flex-wrap: wrap; gap: 8px 12px; align-items: end; margin: 8px 0 12px; }
label { display: block; font-weight: 600; margin-bottom: 2px; }
input, select, textarea { font: inherit; padding: 5px 8px; border: 1px solid var(--line); border-radius: 6px; background: var(--bg); color: var(--fg); }
textarea { width: 100%; max-width: 40rem; min-height: 5rem; }
.tabs { display: flex; flex-wrap: wrap; gap: 4px; margin: 8px 0; padding: 0; list-style: none; }
.tabs a { display: inline-block; padding: 4px 10px; border: 1px solid var(--line); border-radius: 6px; text-decoration: none; }
.tabs a[aria-current="page"] { background: var(--accent); color: var(--bg); border-color: var(--accent); }
.flash { padding: 8px 12px; border-radius: 6px; border: 1px solid var(--ok); margin: 8px 0; }
.error { padding: 8px 12px; border-radius: 6px; border: 1px solid var(--bad); margin: 8px 0; }
.error code, .flash code { font-weight: 600; }
pre { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 8px; overflow-x: auto; max-height: 30rem; }
progress { width: 100%; max-width: 30rem; height: 1.2rem; }
.pager { display: flex; gap: 12px; margin: 8px 0; }
@media (max-width: 640px) { main { padding: 8px; } header.top .who { margin-left: 0; } dl.facts { grid-template-columns: 1fr; } }
`;
