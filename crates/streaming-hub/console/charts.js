// Streaming Hub console: a subscription's charts, drawn here as SVG (no third-party code), from
// its per-minute stats (`GET /v1/subscriptions/{id}/stats`). Loaded before console.js, whose
// helpers (h, api, …) it calls only at run time.
"use strict";

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function clock(t) {
  return new Date(t).toISOString().slice(11, 16);
}

/**
 * One chart over the window's minutes: `series` is [{ name, color, values, kind: "bar" | "line" }]
 * (bars stack). Axes are labelled; the summary is the chart's accessible name.
 */
function chart(testid, title, unit, minutes, series, summary) {
  const [width, height, left, bottom, top] = [720, 180, 48, 28, 10];
  const plotW = width - left - 8;
  const plotH = height - bottom - top;
  const n = minutes.length;
  const stacked = minutes.map((_, i) => series.filter((s) => s.kind === "bar").reduce((a, s) => a + (s.values[i] || 0), 0));
  const lines = series.filter((s) => s.kind === "line").flatMap((s) => s.values.filter((v) => v !== null));
  const max = Math.max(1, ...stacked, ...lines);
  const x = (i) => left + (i * plotW) / Math.max(1, n);
  const y = (v) => top + plotH - (v / max) * plotH;
  const parts = [
    svg("line", { x1: left, y1: top + plotH, x2: left + plotW, y2: top + plotH, stroke: "#5b6673" }),
    svg("line", { x1: left, y1: top, x2: left, y2: top + plotH, stroke: "#5b6673" }),
    svg("text", { x: left - 6, y: top + 10, "text-anchor": "end", "font-size": 11, fill: "#1d232b" }, `${Math.round(max * 10) / 10}`),
    svg("text", { x: left - 6, y: top + plotH, "text-anchor": "end", "font-size": 11, fill: "#1d232b" }, "0"),
    svg("text", { x: 10, y: top + plotH / 2, "font-size": 11, fill: "#1d232b", transform: `rotate(-90 10 ${top + plotH / 2})`, "text-anchor": "middle" }, unit),
  ];
  for (const i of [0, Math.floor(n / 2), n - 1]) {
    if (minutes[i]) parts.push(svg("text", { x: x(i), y: height - 8, "font-size": 11, fill: "#1d232b", "text-anchor": i === 0 ? "start" : i === n - 1 ? "end" : "middle" }, `${clock(minutes[i])} UTC`));
  }
  const barW = Math.max(1, plotW / Math.max(1, n) - 1);
  const base = minutes.map(() => 0);
  for (const s of series.filter((q) => q.kind === "bar")) {
    s.values.forEach((v, i) => {
      if (!v) return;
      parts.push(svg("rect", { x: x(i), y: y(base[i] + v), width: barW, height: Math.max(1, (v / max) * plotH), fill: s.color }, svg("title", {}, `${clock(minutes[i])}: ${v} ${s.name}`)));
      base[i] += v;
    });
  }
  for (const s of series.filter((q) => q.kind === "line")) {
    const points = s.values.map((v, i) => (v === null ? null : `${x(i) + barW / 2},${y(v)}`));
    let run = [];
    for (const p of [...points, null]) {
      if (p) run.push(p);
      else if (run.length) {
        parts.push(run.length === 1
          ? svg("circle", { cx: run[0].split(",")[0], cy: run[0].split(",")[1], r: 2, fill: s.color })
          : svg("polyline", { points: run.join(" "), fill: "none", stroke: s.color, "stroke-width": 2 }));
        run = [];
      }
    }
  }
  // Swatches are SVG (a fill attribute, not an inline style the page's policy refuses).
  const swatch = (color) => svg("svg", { width: 12, height: 12, class: "swatch", "aria-hidden": "true" }, svg("rect", { width: 12, height: 12, rx: 2, fill: color }));
  const legend = h("ul", { class: "legend" }, series.map((s) => h("li", {}, swatch(s.color), s.name)));
  return h(
    "figure",
    { class: "chart", testid },
    h("figcaption", {}, title),
    svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${title}: ${summary}`, width: "100%" }, parts),
    legend,
  );
}

async function statsBlock(sub, window) {
  const stats = await api(`/v1/subscriptions/${sub.id}/stats?window=${window}`);
  const b = stats.buckets;
  const minutes = b.map((m) => m.minute);
  const total = (f) => b.reduce((a, m) => a + m[f], 0);
  const pick = (f) => b.map((m) => m[f]);
  const toggle = h(
    "p",
    { class: "actions", role: "group", "aria-label": "Window" },
    ["1h", "24h"].map((w) => h("button", { type: "button", testid: `stats-${w}`, "aria-pressed": String(w === window), onclick: async () => {
      document.querySelector("[data-testid=stats]").replaceWith(await statsBlock(sub, w));
    } }, w === "1h" ? "Last hour" : "Last day")),
  );
  const p99 = pick("latency_p99_ms").filter((v) => v !== null);
  return h(
    "section",
    { "aria-label": "Statistics", testid: "stats" },
    h("h2", {}, `Statistics, ${window === "1h" ? "last hour" : "last day"}`),
    toggle,
    chart("chart-deliveries", "Attempts per minute", "attempts", minutes, [
      { name: "delivered", color: "#1f6fb2", values: pick("delivered"), kind: "bar" },
      { name: "failed", color: "#d9822b", values: pick("failed"), kind: "bar" },
      { name: "dead letters", color: "#3b3b3b", values: pick("dead"), kind: "bar" },
    ], `${total("delivered")} delivered, ${total("failed")} failed, ${total("dead")} dead-lettered`),
    chart("chart-latency", "Attempt latency", "ms", minutes, [
      { name: "p50", color: "#1f6fb2", values: pick("latency_p50_ms"), kind: "line" },
      { name: "p99", color: "#d9822b", values: pick("latency_p99_ms"), kind: "line" },
    ], p99.length ? `p99 up to ${Math.round(Math.max(...p99))} ms` : "no attempts"),
    chart("chart-backlog", "Backlog (pending and held jobs)", "jobs", minutes, [
      { name: "backlog", color: "#6a3d9a", values: pick("backlog"), kind: "line" },
    ], `now ${b.length && b[b.length - 1].backlog !== null ? b[b.length - 1].backlog : "not sampled"}`),
  );
}
