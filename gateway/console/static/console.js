// dspark-gateway console: copy buttons, and the overview refreshed from /console/live.json every 2 s.
// No inline script (the pages' Content-Security-Policy allows only this file); text goes in as text.
"use strict";

document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const text = document.getElementById(button.dataset.copy).textContent;
  navigator.clipboard.writeText(text).then(() => { button.textContent = "Copied"; });
});

// Times are sent as readable UTC; shown in the reader's own time zone, to the second, in ISO order
// (the sv-SE locale writes 2026-12-06 21:14:52) so they sort and read the same for everyone.
const localTime = new Intl.DateTimeFormat("sv-SE", {
  year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
  hour12: false, timeZoneName: "short",
});
for (const el of document.querySelectorAll("time[datetime]")) {
  const at = new Date(el.getAttribute("datetime"));
  if (!Number.isNaN(at.getTime())) { el.title = el.textContent; el.textContent = localTime.format(at); }
}

const seconds = (v) => (v === null || v === undefined ? "–" : v < 1 ? `${Math.round(v * 1000)} ms` : `${v.toFixed(2)} s`);
const rate = (v) => (v === null || v === undefined ? "–" : `${v.toFixed(1)} tok/s`);
const percent = (v) => (v === null || v === undefined ? "–" : `${(v * 100).toFixed(1)} %`);
const number = (v) => v.toLocaleString("en-US");

function rows(body, cells) {
  body.replaceChildren(...cells.map((values) => {
    const tr = document.createElement("tr");
    for (const value of values) {
      const td = document.createElement("td");
      td.textContent = value;
      tr.append(td);
    }
    return tr;
  }));
}

function show(live, data) {
  const s = data.status, f = data.figures;
  const set = (name, text) => { const el = live.querySelector(`[data-live="${name}"]`); if (el) el.textContent = text; };
  set("slots", `${s.slots_in_use}/${s.slots_total}`);
  set("queue", String(s.queue_depth));
  set("kv", s.kv_budget_tokens ? `${number(s.kv_reserved_tokens)} / ${number(s.kv_budget_tokens)}` : number(s.kv_reserved_tokens));
  set("lane", `${s.long_in_use}/${s.long_slots}`);
  set("ttft", `${seconds(f.ttft_p50_s)} / ${seconds(f.ttft_p95_s)}`);
  set("decode", rate(f.decode_tokens_per_s));
  set("acceptance", percent(f.acceptance_rate));
  set("requests", String(f.requests));
  set("cache_hits", percent(f.cache_hit_ratio));
  const error = f.cache_prediction_error_tokens;
  set("prediction", error === null || error === undefined ? "–" : `${number(Math.round(error))} tokens`);
  const unpredicted = Object.entries(f.cache_unpredicted || {}).map(([r, n]) => `${n} ${r}`);
  set("predicted", `${f.cache_predicted} turns predicted` + (unpredicted.length ? `; unpredicted: ${unpredicted.join(", ")}` : ""));
  rows(live.querySelector('[data-live="holds"]'), s.backends.flatMap((b) => (b.session_holds || []).map((h) =>
    [h.key, h.session, number(h.tokens), seconds(h.left_s)])));
  const phrase = (r) => data.phrases[r] || r;
  const waits = Object.entries(s.waiting_for).filter(([, n]) => n).map(([r, n]) => `${n} waiting for ${phrase(r)}`);
  set("waiting_for", waits.length ? waits.join(", ") : "nothing");
  const why = (name) => Object.entries(s.waiting_by_key[name] || {}).map(([r, n]) => `${n} for ${phrase(r)}`).join(", ");
  const keys = Object.entries(s.keys).map(([name, c]) => [name, c.in_flight, c.waiting, why(name)]);
  rows(live.querySelector('[data-live="keys"]'), keys.length ? keys : [["Nothing running or waiting.", "", "", ""]]);
  rows(live.querySelector('[data-live="backends"]'), s.backends.map((b) =>
    [b.name, b.up ? "yes" : "no", `${b.slots_in_use}/${b.slots_total}`, b.queue_depth, number(b.kv_reserved_tokens)]));
}

const live = document.getElementById("live");
if (live) {
  const refresh = () => fetch(live.dataset.liveUrl, { credentials: "same-origin" })
    .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
    .then((data) => show(live, data))
    .catch(() => {});
  setInterval(refresh, 2000);
}

// The usage page: the range form says how far local time is from UTC (a custom range is typed in
// local time), and its charts are drawn by uPlot from the page's series (one line per key, group or
// model; x in local time, y in tokens or requests per bucket).
// The offset of each typed time is its own date's (a summer date typed in winter is an hour apart).
for (const tz of document.querySelectorAll("[data-tz]")) {
  tz.value = String(new Date().getTimezoneOffset());
  tz.form.addEventListener("submit", () => {
    for (const input of tz.form.querySelectorAll("input[type=datetime-local]")) {
      const at = new Date(input.value);
      let offset = tz.form.querySelector(`input[name="${input.name}_tz"]`);
      if (!input.value || Number.isNaN(at.getTime())) { if (offset) offset.remove(); continue; }
      if (!offset) {
        offset = Object.assign(document.createElement("input"), { type: "hidden", name: `${input.name}_tz` });
        tz.form.append(offset);
      }
      offset.value = String(at.getTimezoneOffset());
    }
  });
}

const PALETTE = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7ea4", "#6e7781", "#953800"];
const compact = (v) => (v === null || v === undefined ? "–"
  : Math.abs(v) >= 1e6 ? `${+(v / 1e6).toFixed(1)}M` : Math.abs(v) >= 1e3 ? `${+(v / 1e3).toFixed(1)}k` : String(v));

function drawUsage(box, data) {
  for (const el of box.querySelectorAll("[data-chart]")) {
    const figure = el.dataset.chart;
    const options = {
      width: Math.max(el.clientWidth - 20, 320),  // inside the box's padding
      height: 260,
      scales: { x: { time: true } },
      series: [{ label: "time" }, ...data.series.map((s, i) => ({
        label: s.name, stroke: PALETTE[i % PALETTE.length], width: 2,
        points: { show: data.buckets.length < 80 }, value: (u, v) => (v === null ? "–" : number(v)),
      }))],
      axes: [{}, { label: `${el.dataset.unit} per ${data.unit}`, size: 60, values: (u, ticks) => ticks.map(compact) }],
    };
    el.replaceChildren();
    if (!data.series.length) {
      el.textContent = "No requests in this range.";
      el.classList.add("hint");
      continue;
    }
    new uPlot(options, [data.buckets, ...data.series.map((s) => s[figure])], el);
    el.dataset.drawn = data.series.map((s) => s.name).join(",");
  }
}

const usageCharts = document.getElementById("usage-charts");
if (usageCharts && typeof uPlot !== "undefined") {
  fetch(usageCharts.dataset.seriesUrl, { credentials: "same-origin" })
    .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
    .then((data) => drawUsage(usageCharts, data))
    .catch((status) => { usageCharts.prepend(Object.assign(document.createElement("p"), { className: "error", textContent: `The chart could not be loaded (${status}).` })); });
}
