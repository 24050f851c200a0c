"""The status page served at `/` by tensorcom.transport.metrics_http: one self-contained HTML file
(no build step, no external resource: it works offline) that fetches /status.json every second and
shows the totals and rates, each consumer's rate and data wait, each stage's share, the verdict and
the workers. Element ids the tests read: `rate`, `workers`, `verdict`, `consumers` (one row per
consumer, `data-consumer` = its name), `stages` (one row per stage, `data-stage`), `updated`."""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tensorcom status</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
h1 { font-size: 1.3em; margin: 0 0 .6em; } h2 { font-size: 1.05em; margin: 1.2em 0 .4em; }
.cards { display: flex; gap: 1em; flex-wrap: wrap; }
.card { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .5em 1em; min-width: 9em; }
.card b { display: block; font-size: 1.5em; }
table { border-collapse: collapse; background: #fff; min-width: 36em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.bar { display: inline-block; height: .8em; background: #4a90d9; vertical-align: middle; }
.wait .bar { background: #d9534f; } #verdict { font-weight: bold; } .muted { color: #888; }
</style></head>
<body>
<h1>tensorcom status</h1>
<div class="cards">
  <div class="card">samples/s<b id="rate">&ndash;</b></div>
  <div class="card">batches/s<b id="batch-rate">&ndash;</b></div>
  <div class="card">batches<b id="batches">&ndash;</b></div>
  <div class="card">workers<b id="workers">&ndash;</b></div>
</div>
<h2>Verdict</h2><div id="verdict" class="muted">no verdict yet</div>
<h2>Consumers</h2>
<table><thead><tr><th>consumer</th><th>samples/s</th><th>samples</th><th>lag</th><th>data wait</th></tr></thead>
<tbody id="consumers"></tbody></table>
<h2>Stages</h2>
<table><thead><tr><th>stage</th><th>share</th><th>ms/sample</th><th>seconds</th></tr></thead>
<tbody id="stages"></tbody></table>
<p class="muted">updated <span id="updated">never</span> from <a href="status.json">status.json</a>;
<a href="metrics">metrics</a> for Prometheus</p>
<script>
"use strict";
function fmt(v, digits) { return v === null || v === undefined ? "\\u2013" : Number(v).toFixed(digits); }
function pct(v) { return v === null || v === undefined ? "\\u2013" : (100 * v).toFixed(1) + "%"; }
function bar(v) { return v === null || v === undefined ? "" :
  '<span class="bar" style="width:' + Math.round(Math.min(1, v) * 80) + 'px"></span> '; }
function esc(s) {
  return String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
}
function row(cells, attr) { return "<tr " + attr + ">" + cells.map(c => "<td>" + c + "</td>").join("") + "</tr>"; }
function show(s) {
  document.getElementById("rate").textContent = fmt(s.samples_per_s, 1);
  document.getElementById("batch-rate").textContent = fmt(s.batches_per_s, 2);
  document.getElementById("batches").textContent = fmt(s.batches, 0);
  document.getElementById("workers").textContent = fmt(s.workers, 0);
  const verdict = document.getElementById("verdict");
  verdict.textContent = s.verdict || "no verdict yet"; verdict.className = s.verdict ? "" : "muted";
  document.getElementById("consumers").innerHTML = s.consumers.map(c => row(
    [esc(c.name), fmt(c.samples_per_s, 1), fmt(c.samples, 0), fmt(c.lag, 0),
     '<span class="wait">' + bar(c.data_wait) + pct(c.data_wait) + "</span>"],
    'data-consumer="' + esc(c.name) + '"')).join("") ||
    '<tr><td colspan="5" class="muted">no consumers</td></tr>';
  document.getElementById("stages").innerHTML = Object.entries(s.stages).map(([name, st]) => row(
    [esc(name), bar(st.share) + pct(st.share), fmt(st.per_sample_ms, 3), fmt(st.seconds, 1)],
    'data-stage="' + esc(name) + '"')).join("") ||
    '<tr><td colspan="4" class="muted">no stage times</td></tr>';
  document.getElementById("updated").textContent = new Date().toLocaleTimeString();
}
function poll() {
  fetch("status.json", {cache: "no-store"}).then(r => r.json()).then(show)
    .catch(e => { document.getElementById("updated").textContent = "failed: " + e; })
    .finally(() => setTimeout(poll, 1000));
}
poll();
</script>
</body></html>
"""
