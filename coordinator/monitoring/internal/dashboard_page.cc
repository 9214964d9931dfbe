#include "coordinator/monitoring/internal/dashboard_page.h"

namespace tessera::internal {

const char kDashboardPage[] = R"page(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Tessera</title>
<style>
  :root { --fg: #1d2330; --muted: #6b7385; --line: #e3e6ee; --accent: #2f6fde; --bad: #c23b3b;
          --good: #2c8c4a; --bg: #f6f7fa; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
         color: var(--fg); background: var(--bg); }
  header { display: flex; align-items: baseline; gap: 16px; padding: 14px 24px;
           background: #fff; border-bottom: 1px solid var(--line); }
  header h1 { font-size: 18px; margin: 0; }
  header .sub { color: var(--muted); }
  #status { font-weight: 600; padding: 2px 8px; border-radius: 10px; background: #e8effc;
            color: var(--accent); }
  #status.finished { background: #e6f4ea; color: var(--good); }
  #status.failed, #status.unreachable { background: #fbeaea; color: var(--bad); }
  main { padding: 16px 24px; display: grid; gap: 16px;
         grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); }
  section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; }
  section.wide { grid-column: 1 / -1; }
  h2 { font-size: 13px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted);
       margin: 0 0 8px; }
  .figures { display: flex; flex-wrap: wrap; gap: 28px; }
  .figure .value { font-size: 22px; font-weight: 600; }
  .figure .label { color: var(--muted); font-size: 12px; }
  table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
  th, td { text-align: right; padding: 3px 8px; border-bottom: 1px solid var(--line); }
  th:first-child, td:first-child { text-align: left; }
  th { color: var(--muted); font-weight: 500; font-size: 12px; }
  td.down { color: var(--bad); }
  svg.chart { width: 100%; height: 180px; display: block; }
  svg.chart polyline { fill: none; stroke: var(--accent); stroke-width: 1.6;
                       vector-effect: non-scaling-stroke; }
  svg.chart polyline.second { stroke: #d97a1c; }
  svg.chart text { font-size: 10px; fill: var(--muted); }
  svg.chart line { stroke: var(--line); }
  .empty { color: var(--muted); font-style: italic; }
  #events { margin: 0; padding-left: 18px; max-height: 180px; overflow: auto; }
  .hot { color: var(--muted); font-size: 12px; }
</style>
</head>
<body data-updates="0">
<header>
  <h1>Tessera</h1>
  <span id="workload" class="sub">&nbsp;</span>
  <span id="status">connecting</span>
  <span id="updated" class="sub"></span>
</header>
<main>
  <section class="wide">
    <div class="figures">
      <div class="figure"><div class="value" id="step">-</div><div class="label">step</div></div>
      <div class="figure"><div class="value" id="rate">-</div>
        <div class="label">examples/s (last interval)</div></div>
      <div class="figure"><div class="value" id="loss">-</div>
        <div class="label">training loss (last interval)</div></div>
      <div class="figure"><div class="value" id="eval">-</div>
        <div class="label" id="eval-label">latest validation</div></div>
      <div class="figure"><div class="value" id="queue">-</div>
        <div class="label">closures queued</div></div>
      <div class="figure"><div class="value" id="elapsed">-</div>
        <div class="label">elapsed</div></div>
    </div>
  </section>
  <section><h2>Training loss</h2><svg id="loss-chart" class="chart"></svg></section>
  <section><h2>Examples per second</h2><svg id="rate-chart" class="chart"></svg></section>
  <section><h2>Validation</h2><svg id="eval-chart" class="chart"></svg></section>
  <section><h2>Checkpoints and recoveries</h2><ul id="events"></ul></section>
  <section class="wide" id="ps-section"><h2>Parameter servers</h2>
    <table id="ps"><thead><tr><th>shard</th><th>node</th><th>rows</th><th>bytes</th>
      <th>version</th><th>updates/s</th><th>hottest rows (updates)</th></tr></thead>
      <tbody></tbody></table></section>
  <section class="wide"><h2 id="workers-title">Workers</h2>
    <table id="workers"><thead><tr><th>worker</th><th>state</th><th>running</th>
      <th>closures done</th><th>errors</th><th>failures</th><th>restarts</th>
      <th>latest closure (step)</th></tr></thead><tbody></tbody></table>
    <div id="closures" class="hot"></div></section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const NS = "http://www.w3.org/2000/svg";

function human(n, digits) {
  if (n === null || n === undefined || Number.isNaN(n)) return "-";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(2) + " G";
  if (a >= 1e6) return (n / 1e6).toFixed(2) + " M";
  if (a >= 1e4) return (n / 1e3).toFixed(1) + " k";
  return n.toFixed(digits === undefined ? 0 : digits);
}
function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; ++i; }
  return n.toFixed(i === 0 ? 0 : 1) + " " + units[i];
}
function duration(s) {
  if (s === undefined || s === null) return "-";
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
}
function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
}

// Draws series ([[x, y], ...], each its own polyline) into an SVG, scaled to their range.
function chart(svg, series, yLabel) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  // One user unit per pixel, so the labels keep their shape at any width.
  const W = svg.clientWidth || 600, H = svg.clientHeight || 180, L = 48, B = 18, T = 8, R = 8;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const all = series.flat().filter((p) => Number.isFinite(p[1]));
  if (all.length === 0) {
    const t = document.createElementNS(NS, "text");
    t.setAttribute("x", W / 2); t.setAttribute("y", H / 2); t.setAttribute("text-anchor", "middle");
    t.textContent = "no data yet";
    svg.appendChild(t);
    svg.dataset.points = "0";
    return;
  }
  let x0 = Math.min(...all.map((p) => p[0])), x1 = Math.max(...all.map((p) => p[0]));
  let y0 = Math.min(...all.map((p) => p[1])), y1 = Math.max(...all.map((p) => p[1]));
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y1 += Math.abs(y0) * 0.05 + 1e-6; y0 -= Math.abs(y0) * 0.05 + 1e-6; }
  const sx = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  for (const [y, label] of [[y0, y0], [y1, y1]]) {
    const line = document.createElementNS(NS, "line");
    line.setAttribute("x1", L); line.setAttribute("x2", W - R);
    line.setAttribute("y1", sy(y)); line.setAttribute("y2", sy(y));
    svg.appendChild(line);
    const t = document.createElementNS(NS, "text");
    t.setAttribute("x", L - 4); t.setAttribute("y", sy(y) + 3); t.setAttribute("text-anchor", "end");
    t.textContent = human(label, Math.abs(label) < 10 ? 3 : 0);
    svg.appendChild(t);
  }
  for (const [x, anchor] of [[x0, "start"], [x1, "end"]]) {
    const t = document.createElementNS(NS, "text");
    t.setAttribute("x", sx(x)); t.setAttribute("y", H - 4); t.setAttribute("text-anchor", anchor);
    t.textContent = "step " + Math.round(x);
    svg.appendChild(t);
  }
  let points = 0;
  series.forEach((s, i) => {
    const ok = s.filter((p) => Number.isFinite(p[1]));
    if (ok.length === 0) return;
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("points", ok.map((p) => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" "));
    if (i > 0) line.setAttribute("class", "second");
    svg.appendChild(line);
    points += ok.length;
  });
  svg.dataset.points = String(points);
}

function drawRun(run) {
  const config = run.configuration || {};
  $("workload").textContent = [config.workload, config.mode && config.mode + " mode",
                               config.strategy && config.strategy + " strategy",
                               run.version && "tessera " + run.version].filter(Boolean).join("  ·  ");
  const status = $("status");
  status.textContent = run.status || "starting";
  status.className = run.status || "starting";
  $("step").textContent = human(run.step) + (run.total_steps ? " / " + human(run.total_steps) : "");
  const points = run.points || [];
  const last = points.length ? points[points.length - 1] : null;
  $("rate").textContent = last ? human(last.examples_per_sec) : "-";
  $("loss").textContent = last && last.loss !== null ? last.loss.toFixed(4) : "-";
  $("queue").textContent = last && last.queue_depth !== undefined ? human(last.queue_depth) : "-";
  $("elapsed").textContent = duration(run.elapsed_seconds);
  chart($("loss-chart"), [points.map((p) => [p.step, p.loss])]);
  chart($("rate-chart"), [points.map((p) => [p.step, p.examples_per_sec])]);
  const evals = run.evaluations || [];
  const metric = evals.some((e) => e.auc !== undefined) ? "auc"
               : evals.some((e) => e.accuracy !== undefined) ? "accuracy" : "loss";
  chart($("eval-chart"), [evals.map((e) => [e.step, e[metric]])]);
  if (evals.length) {
    const e = evals[evals.length - 1];
    $("eval").textContent = (e[metric] !== undefined ? e[metric].toFixed(4) : "-");
    $("eval-label").textContent = "validation " + metric + " (step " + e.step + ")";
  }
  const list = $("events");
  list.textContent = "";
  const events = run.events || [];
  if (events.length === 0) {
    const li = document.createElement("li");
    li.className = "empty";
    li.textContent = "none yet";
    list.appendChild(li);
  }
  for (const e of events.slice().reverse()) {
    const li = document.createElement("li");
    li.className = "event";
    const what = e.kind === "checkpoint" ? "checkpoint " + (e.dir || "")
        : e.kind === "ps_recovery" ? "ps " + e.ps_task + " restored on " + (e.node || "?") +
            ", " + e.lost_steps + " steps lost"
        : e.kind;
    li.textContent = "at " + duration(e.seconds) + ", step " + e.step + ": " + what +
        (e.duration_seconds !== undefined ? " (" + duration(e.duration_seconds) + ")" : "");
    list.appendChild(li);
  }
}

function drawCluster(cluster) {
  // A mirrored run has no parameter servers: its workers are its replicas.
  const mirrored = cluster.strategy === "mirrored";
  $("ps-section").hidden = mirrored;
  $("workers-title").textContent = mirrored ? "Replicas" : "Workers";
  const ps = $("ps").tBodies[0];
  ps.textContent = "";
  for (const node of cluster.ps || []) {
    if (!node.reachable) {
      const row = ps.insertRow();
      row.className = "node-down";
      cell(row, "(node " + node.task + ")");
      cell(row, node.address || ("ps " + node.task), "down");
      const td = document.createElement("td");
      td.colSpan = 5; td.className = "down"; td.textContent = node.error || "not answering";
      row.appendChild(td);
      continue;
    }
    for (const s of node.shards || []) {
      const row = ps.insertRow();
      row.className = "shard";
      cell(row, s.name);
      cell(row, node.address || ("ps " + node.task));
      cell(row, human(s.rows));
      cell(row, bytes(s.bytes));
      cell(row, human(s.version));
      cell(row, s.updates_per_sec === undefined ? "-" : human(s.updates_per_sec, 1));
      // A shard only ever updated densely (a dense parameter's) has no row hotter than another.
      const hot = s.hottest_rows || [];
      cell(row, hot.length ? hot.map((h) => h[0] + " (" + human(h[1]) + ")").join(", ")
                : s.updates > 0 ? "- (dense: every row)" : "-", "hot");
    }
  }
  const workers = $("workers").tBodies[0];
  workers.textContent = "";
  const pool = cluster.workers || {};
  for (const w of pool.slots || []) {
    const row = workers.insertRow();
    row.className = "worker";
    cell(row, (mirrored ? "replica " : "worker ") + w.slot);
    cell(row, !w.live ? "down" : w.running > 0 ? "running" : "idle", w.live ? "" : "down");
    cell(row, String(w.running));
    cell(row, human(w.completed));
    cell(row, human(w.errors));
    cell(row, human(w.failures));
    cell(row, human(Math.max(0, w.starts - 1)));
    // Closures not numbered by a step (evaluations, a program's own) have ids from 2^62 up,
    // beyond what a JavaScript number holds exactly: they are shown without one.
    cell(row, mirrored ? (w.last_step >= 0 ? "train_step " + w.last_step : "-")
        : w.last_closure < 0 ? "-"
        : (w.last_function || "closure") + (w.last_step >= 0 ? " " + w.last_step : "") +
          (w.last_closure < 2 ** 53 ? " (#" + w.last_closure + ")" : ""));
  }
  const c = cluster.closures || {};
  $("closures").textContent = mirrored
      ? "synchronous steps: each replica trains every step (closures done counts them)"
      : "closures: " + human(c.scheduled) + " scheduled, " +
      human(c.completed) + " completed, " + human(c.retried) + " retried, " +
      human(c.queued) + " queued";
}

let updates = 0;
async function refresh() {
  try {
    const [run, cluster] = await Promise.all([
      fetch("api/run").then((r) => r.json()),
      fetch("api/cluster").then((r) => r.json())]);
    drawRun(run);
    drawCluster(cluster);
    document.body.dataset.updates = String(++updates);
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("status").textContent = "unreachable";
    $("status").className = "unreachable";
  }
}
refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
)page";

}  // namespace tessera::internal
