// simbench report.html: interactive line charts drawn as SVG from CHARTS, and sortable tables.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
// Twenty colours that stay apart (CIELAB distance at least 27 between any two) and dark enough to read as a
// line on white: the ten usual ones, then ten picked to lie farthest from all before them. Lines past the
// twentieth are dashed.
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
  "#bcbd22", "#17becf", "#4b5a0f", "#a5004b", "#c3a569", "#ff8787", "#5aa578", "#964b00", "#1e87ff",
  "#870078", "#0f5a4b", "#d2961e"];
const LEGEND_ROW = 18, LEGEND_NAME_MAX = 24;  // a legend name longer than this is cut, whole on hover

function element(name, attributes, parent) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (parent) parent.appendChild(node);
  return node;
}

function niceTicks(low, high, count) {
  const span = high - low || Math.abs(high) || 1;
  const step0 = Math.pow(10, Math.floor(Math.log10(span / count)));
  const step = [1, 2, 5, 10].map((f) => f * step0).find((s) => span / s <= count) || 10 * step0;
  const ticks = [];
  for (let t = Math.ceil(low / step) * step; t <= high + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
  return ticks;
}

function drawChart(container, chart) {
  const width = 860, left = 64, right = 200, top = 16, bottom = 48;
  const height = Math.max(420, top + 8 + chart.lines.length * LEGEND_ROW);  // the legend never runs off
  const svg = element("svg", {viewBox: `0 0 ${width} ${height}`, role: "img"}, container);
  const all = chart.lines.flatMap((line) => line.points);
  if (chart.reference) all.push([NaN, chart.reference.value]);
  const xs = all.map((p) => p[0]).filter(Number.isFinite);
  const ys = all.map((p) => p[1]).filter(Number.isFinite);
  if (!xs.length) return;
  const fx = chart.log2_x ? (v) => Math.log2(v) : (v) => v;
  let [x0, x1] = [Math.min(...xs.map(fx)), Math.max(...xs.map(fx))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  const pad = (y1 - y0) * 0.06 || Math.abs(y1) * 0.05 || 1;
  y0 -= pad; y1 += pad;
  const px = (v) => left + (fx(v) - x0) / (x1 - x0) * (width - left - right);
  const py = (v) => top + (y1 - v) / (y1 - y0) * (height - top - bottom);
  const axes = element("g", {class: "axes"}, svg);
  for (const t of niceTicks(y0, y1, 6)) {
    element("line", {x1: left, x2: width - right, y1: py(t), y2: py(t), class: "grid"}, axes);
    element("text", {x: left - 6, y: py(t) + 4, "text-anchor": "end"}, axes).textContent = t;
  }
  const xticks = chart.log2_x ? [...new Set(xs)].sort((a, b) => a - b) : niceTicks(x0, x1, 8);
  for (const t of xticks) {
    element("text", {x: px(t), y: height - bottom + 16, "text-anchor": "middle"}, axes).textContent =
      t >= 1024 && chart.log2_x ? `${t / 1024}k` : t;
  }
  element("text", {x: (left + width - right) / 2, y: height - 8, "text-anchor": "middle", class: "label"}, axes)
    .textContent = chart.x_label;
  element("text", {x: 14, y: (top + height - bottom) / 2, "text-anchor": "middle", class: "label",
    transform: `rotate(-90 14 ${(top + height - bottom) / 2})`}, axes).textContent = chart.y_label;
  if (chart.reference) {
    const y = py(chart.reference.value);
    element("line", {x1: left, x2: width - right, y1: y, y2: y, class: "reference"}, svg);
  }
  chart.lines.forEach((line, index) => {
    const colour = COLOURS[index % COLOURS.length];
    const dashes = index < COLOURS.length ? "none" : "6 3";
    const group = element("g", {class: "series", "data-name": line.name}, svg);
    element("polyline", {points: line.points.map((p) => `${px(p[0])},${py(p[1])}`).join(" "), stroke: colour,
      fill: "none", "stroke-width": 2, "stroke-dasharray": dashes}, group);
    for (const [x, y] of line.points) {
      const dot = element("circle", {cx: px(x), cy: py(y), r: 3.5, fill: colour}, group);
      element("title", {}, dot).textContent = `${line.name}: ${chart.x_label} ${x}, ${chart.y_label} ${y.toPrecision(5)}`;
    }
    const entry = element("g", {class: "legend",
      transform: `translate(${width - right + 12},${top + 8 + index * LEGEND_ROW})`}, svg);
    element("line", {x1: 0, x2: 14, y1: 6, y2: 6, stroke: colour, "stroke-width": 4, "stroke-dasharray": dashes},
      entry);
    const shown = line.name.length > LEGEND_NAME_MAX ? `${line.name.slice(0, LEGEND_NAME_MAX - 1)}…` : line.name;
    element("text", {x: 20, y: 10}, entry).textContent = shown;
    element("title", {}, entry).textContent = `${line.name}: click to hide or show`;
    entry.addEventListener("click", () => {
      const hidden = group.classList.toggle("hidden");
      entry.classList.toggle("off", hidden);
    });
  });
  if (chart.reference) {  // after the lines, so that its white outline keeps it readable over them
    element("text", {x: width - right - 4, y: py(chart.reference.value) - 4, "text-anchor": "end",
      class: "reference-label"}, svg).textContent = `${chart.reference.label}: ${chart.reference.value.toFixed(3)}x`;
  }
}

function sortable(table) {
  table.querySelectorAll("th").forEach((header, column) => {
    header.addEventListener("click", () => {
      const ascending = header.dataset.order !== "ascending";
      table.querySelectorAll("th").forEach((other) => delete other.dataset.order);
      header.dataset.order = ascending ? "ascending" : "descending";
      const body = table.tBodies[0];
      const key = (row) => row.cells[column].dataset.value;
      const rows = [...body.rows].sort((a, b) => {
        const [p, q] = [key(a), key(b)];
        const [m, n] = [parseFloat(p), parseFloat(q)];
        const order = Number.isFinite(m) && Number.isFinite(n) ? m - n : p.localeCompare(q);
        return ascending ? order : -order;
      });
      rows.forEach((row) => body.appendChild(row));
    });
  });
}

CHARTS.forEach((chart, index) => drawChart(document.getElementById(`chart-${index}`), chart));
document.querySelectorAll("table[data-sortable]").forEach(sortable);
