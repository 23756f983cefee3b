// The live view: one EventSource on /events, one Frame (internal/webui/frame.go) per interval;
// each chart keeps the last WINDOW frames and is rebuilt when a new series (a VIP, pool or
// backend) appears.
"use strict";
const WINDOW = 120;
const COLORS = ["#2f81f7", "#3fb950", "#d29922", "#f85149", "#a371f7", "#39c5cf", "#ff7b72", "#e3b341", "#8b949e", "#56d364"];

class Chart {
  constructor(el) {
    this.el = el;
    this.keys = [];
    this.data = [[]];
    this.plot = null;
    el.innerHTML = "";
    const t = document.createElement("div");
    t.className = "title";
    t.textContent = el.dataset.title;
    el.appendChild(t);
    this.box = document.createElement("div");
    this.box.className = "none";
    this.box.textContent = "no data yet";
    el.appendChild(this.box);
  }
  // push adds one frame's values (an object key -> number, null for a gap).
  push(t, values) {
    let grew = false;
    for (const k of Object.keys(values).sort()) {
      if (!this.keys.includes(k)) {
        this.keys.push(k);
        this.data.push(this.data[0].map(() => null));
        grew = true;
      }
    }
    this.data[0].push(t / 1000);
    this.keys.forEach((k, i) => this.data[i + 1].push(k in values ? values[k] : null));
    if (this.data[0].length > WINDOW) this.data.forEach(s => s.shift());
    if (this.keys.length === 0) return;
    if (grew || !this.plot) this.build();
    else this.plot.setData(this.data);
  }
  build() {
    if (this.plot) this.plot.destroy();
    this.box.className = "";
    this.box.textContent = "";
    const opts = {
      width: Math.max(200, this.el.clientWidth), height: 150,
      scales: { x: { time: true }, y: this.el.dataset.max ? { range: [0, +this.el.dataset.max] } : {} },
      axes: [
        { stroke: "#7d8a99", grid: { stroke: "#263040" }, space: 70, incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300], values: (u, ts) => ts.map(hms) },
        { stroke: "#7d8a99", grid: { stroke: "#263040" }, size: 50 },
      ],
      series: [{}].concat(this.keys.map((k, i) => ({ label: k, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false }))),
    };
    this.plot = new uPlot(opts, this.data, this.box);
  }
}

// hms labels the time axis: the view moves a second at a time.
const hms = t => new Date(t * 1000).toLocaleTimeString([], { hour12: false });

const charts = {};
document.querySelectorAll("[data-chart]").forEach(el => { charts[el.dataset.chart] = new Chart(el); });

const fmt = (x, d = 1) => (x === null || x === undefined || x < 0) ? "-" : x.toFixed(d);
const sum = o => Object.values(o || {}).reduce((a, b) => a + b, 0);
const set = (id, v) => { document.getElementById(id).textContent = v; };
const map = (o, f) => Object.fromEntries(Object.entries(o || {}).map(([k, v]) => [k, f(v)]));

function table(id, head, rows) {
  const el = document.getElementById(id);
  el.innerHTML = "";
  const tr = document.createElement("tr");
  head.forEach(h => { const th = document.createElement("th"); th.textContent = h; tr.appendChild(th); });
  el.appendChild(tr);
  for (const r of rows) {
    const row = document.createElement("tr");
    r.forEach(c => { const td = document.createElement("td"); td.textContent = c; row.appendChild(td); });
    el.appendChild(row);
  }
}

function stopsPresent(f) {
  const have = {};
  for (const t of f.targets || []) have[t.stop] = true;
  for (const [section, stop] of [["dns", "dns"], ["edge", "edge"], ["l4", "l4"], ["l7", "l7"], ["app", "app"]]) {
    document.getElementById(section).classList.toggle("empty", !have[stop]);
  }
  const el = document.getElementById("targets");
  el.innerHTML = "";
  for (const t of f.targets || []) {
    const s = document.createElement("span");
    s.textContent = t.stop + " " + t.name;
    if (!t.up) { s.className = "down"; s.title = t.error || "down"; }
    el.appendChild(s);
  }
}

function render(f) {
  set("seq", f.seq);
  set("clock", new Date(f.t).toLocaleTimeString());
  stopsPresent(f);
  charts["dns-zone"].push(f.t, f.dns.by_zone);
  charts["dns-policy"].push(f.t, f.dns.by_policy);
  set("dns-total", fmt(sum(f.dns.by_zone)));
  const e = f.edge;
  charts["edge-rates"].push(f.t, { hits: e.hits, misses: e.misses, stale: e.stale });
  charts["edge-ratio"].push(f.t, { "hit ratio": e.ratio < 0 ? null : 100 * e.ratio });
  set("edge-ratio", e.ratio < 0 ? "-" : (100 * e.ratio).toFixed(0) + "%");
  set("edge-total", fmt(e.hits + e.misses + e.stale));
  const vips = f.l4.vips || {}, bes = f.l4.backends || {};
  charts["l4-vip"].push(f.t, map(vips, v => v.packets));
  charts["l4-backend"].push(f.t, map(bes, v => v.packets));
  set("l4-total", fmt(sum(map(vips, v => v.packets)), 0));
  set("l4-flows", fmt(sum(map(vips, v => v.flows)), 0));
  set("l4-drops", fmt(sum(map(vips, v => v.drops)), 1));
  table("l4-vips", ["VIP", "packets/s", "flows", "drops/s"], Object.keys(vips).sort().map(k => [k, fmt(vips[k].packets, 0), vips[k].flows, fmt(vips[k].drops)]));
  table("l4-backends", ["backend", "packets/s", "flows"], Object.keys(bes).sort().map(k => [k, fmt(bes[k].packets, 0), bes[k].flows]));
  const guard = f.l4.guard_drops || {};
  table("l4-guard", ["guard drop", "drops/s"], Object.keys(guard).sort().map(k => [k, fmt(guard[k], 1)]));
  charts["l7-rps"].push(f.t, map(f.l7, p => p.rps));
  charts["l7-p99"].push(f.t, map(f.l7, p => p.p99 < 0 ? null : 1000 * p.p99));
  set("l7-total", fmt(sum(map(f.l7, p => p.rps))));
  const worst = Math.max(-1, ...Object.values(f.l7 || {}).map(p => p.p99));
  set("l7-p99", worst < 0 ? "-" : (1000 * worst).toFixed(1) + " ms");
  charts["app"].push(f.t, f.app);
  set("app-total", fmt(sum(f.app)));
}

const conn = document.getElementById("conn");
const es = new EventSource("/events");
es.onopen = () => { conn.textContent = "live"; conn.className = "ok"; };
es.onerror = () => { conn.textContent = "reconnecting"; conn.className = "bad"; };
es.onmessage = m => render(JSON.parse(m.data));
