// simbench report.html: interactive line charts drawn as SVG from CHARTS, and sortable tables.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
// Lines without a style of their own (simbench.report.styles gives each strategy its family's hue, a shade and
// a marker) take these: twenty colours that stay apart (CIELAB distance at least 27 between any two) and dark
// enough to read as a line on white. Lines past the twentieth are dashed.
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
  "#bcbd22", "#17becf", "#4b5a0f", "#a5004b", "#c3a569", "#ff8787", "#5aa578", "#964b00", "#1e87ff",
  "#870078", "#0f5a4b", "#d2961e"];
const LEGEND_ROW = 18, LEGEND_NAME_MAX = 24;  // a legend name longer than this is cut, whole on hover
const Y_TICKS = 8;  // about as many y ticks as fit a 420-pixel chart with room between their labels

function element(name, attributes, parent) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (parent) parent.appendChild(node);
  return node;
}

function niceStep(span, count) {
  const step0 = Math.pow(10, Math.floor(Math.log10(span / count)));
  return [1, 2, 2.5, 5, 10].map((f) => f * step0).find((s) => span / s <= count) || 10 * step0;
}

function niceTicks(low, high, count) {
  const span = high - low || Math.abs(high) || 1;
  const step = niceStep(span, count);
  const ticks = [];
  for (let t = Math.ceil(low / step) * step; t <= high + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
  return {ticks, step};
}

// Decimals that tell ticks `step` apart (0.25 needs 2, 0.2 needs 1, 5 needs 0).
function stepDecimals(step) {
  for (let decimals = 0; decimals < 10; decimals++) {
    if (Math.abs(Math.round(step * 10 ** decimals) - step * 10 ** decimals) < 1e-6) return decimals;
  }
  return 10;
}

function formatValue(value, format) {
  const shown = Math.abs(value) >= 1000 ? Math.round(value).toLocaleString("en") : value.toPrecision(4);
  return format === "x" ? `${(+value).toFixed(3)}x` : format === "%" ? `${shown} %` : shown;
}

function countText(count) {
  if (count >= 1048576 && count % 1048576 === 0) return `${count / 1048576}M`;
  if (count >= 1024 && count % 1024 === 0) return `${count / 1024}k`;
  return count.toLocaleString("en");
}

// A marker of matplotlib's letters (simbench.report.styles.MARKERS) at (x, y), radius about r.
function marker(shape, x, y, r, colour, parent) {
  const polygon = (points) => element("polygon", {points: points.map(([a, b]) => `${x + a * r},${y + b * r}`).join(" "),
    fill: colour}, parent);
  const regular = (sides, turn, scale = 1.15) => polygon([...Array(sides).keys()].map((i) => {
    const angle = turn + 2 * Math.PI * i / sides;
    return [scale * Math.sin(angle), -scale * Math.cos(angle)];
  }));
  switch (shape) {
    case "s": return polygon([[-0.9, -0.9], [0.9, -0.9], [0.9, 0.9], [-0.9, 0.9]]);
    case "^": return regular(3, 0, 1.3);
    case "v": return regular(3, Math.PI, 1.3);
    case "<": return regular(3, -Math.PI / 2, 1.3);
    case ">": return regular(3, Math.PI / 2, 1.3);
    case "D": return regular(4, 0, 1.25);
    case "p": return regular(5, 0);
    case "h": return regular(6, 0);
    case "P": return polygon([[-0.35, -1], [0.35, -1], [0.35, -0.35], [1, -0.35], [1, 0.35], [0.35, 0.35], [0.35, 1],
      [-0.35, 1], [-0.35, 0.35], [-1, 0.35], [-1, -0.35], [-0.35, -0.35]]);
    case "X": return polygon([[-1, -0.5], [-0.5, -1], [0, -0.5], [0.5, -1], [1, -0.5], [0.5, 0], [1, 0.5], [0.5, 1],
      [0, 0.5], [-0.5, 1], [-1, 0.5], [-0.5, 0]]);
    case "*": return polygon([...Array(10).keys()].map((i) => {
      const angle = Math.PI * i / 5, scale = i % 2 ? 0.55 : 1.3;
      return [scale * Math.sin(angle), -scale * Math.cos(angle)];
    }));
    default: return element("circle", {cx: x, cy: y, r, fill: colour}, parent);
  }
}

// One chart, redrawn whole when its view changes: lines hidden or shown (the y axis fits what is shown) or
// a range of y dragged out to zoom into (a double click zooms back out).
function drawChart(container, chart, state = {hidden: new Set(), zoom: null, focus: null}) {
  container.replaceChildren();
  const width = 860, left = 64, right = 210, top = 16, bottom = 48;
  const families = [...new Set(chart.lines.map((line) => line.family).filter(Boolean))];
  const rows = chart.lines.length + (families.length > 1 ? families.length : 0);
  const height = Math.max(420, top + 8 + rows * LEGEND_ROW);  // the legend never runs off
  const svg = element("svg", {viewBox: `0 0 ${width} ${height}`, role: "img"}, container);
  const shown = chart.lines.filter((line) => !state.hidden.has(line.name));
  const all = (shown.length ? shown : chart.lines).flatMap((line) => line.points);
  const xs = chart.lines.flatMap((line) => line.points).map((p) => p[0]).filter(Number.isFinite);
  let ys = all.map((p) => p[1]).filter(Number.isFinite);
  if (!xs.length) return;
  if (chart.reference && !state.zoom) ys.push(chart.reference.value);
  const clipped = chart.y_max !== undefined && !state.zoom;
  if (clipped) ys = ys.map((y) => Math.min(y, chart.y_max));
  const fx = chart.log2_x ? (v) => Math.log2(v) : (v) => v;
  let [x0, x1] = [Math.min(...xs.map(fx)), Math.max(...xs.map(fx))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  let [y0, y1] = state.zoom || [Math.min(...ys), Math.max(...ys)];
  if (!state.zoom) {
    const pad = (y1 - y0) * 0.06 || Math.abs(y1) * 0.05 || 1;
    y0 -= pad; y1 += clipped ? 0 : pad;
  }
  const px = (v) => left + (fx(v) - x0) / (x1 - x0) * (width - left - right);
  const py = (v) => top + (y1 - v) / (y1 - y0) * (height - top - bottom);
  const id = container.id;
  element("rect", {x: left, y: top, width: width - left - right, height: height - top - bottom},
    element("clipPath", {id: `${id}-plot`}, element("defs", {}, svg)));
  const axes = element("g", {class: "axes"}, svg);
  const {ticks, step} = niceTicks(y0, y1, Y_TICKS);
  for (const t of ticks) {
    element("line", {x1: left, x2: width - right, y1: py(t), y2: py(t), class: "grid"}, axes);
    element("text", {x: left - 6, y: py(t) + 4, "text-anchor": "end"}, axes).textContent = t.toFixed(stepDecimals(step));
  }
  const allX = [...new Set(xs)].sort((a, b) => a - b);
  // Device counts: every one while they fit 48 pixels apart, else every second, fourth...
  const every = chart.log2_x ? Math.ceil(allX.length / Math.floor((width - left - right) / 48)) : 1;
  const xticks = chart.log2_x ? allX.filter((_, index) => index % every === 0) : niceTicks(x0, x1, 8).ticks;
  for (const t of xticks) {
    element("text", {x: px(t), y: height - bottom + 16, "text-anchor": "middle"}, axes).textContent =
      chart.log2_x ? countText(t) : t.toLocaleString("en");
  }
  const units = chart.y_format === "%" ? " (%)" : "";
  element("text", {x: (left + width - right) / 2, y: height - 8, "text-anchor": "middle", class: "label"}, axes)
    .textContent = chart.x_label + (chart.log2_x && allX.some((t) => countText(t).match(/[kM]$/)) ? ", k = 1,024" : "");
  element("text", {x: 14, y: (top + height - bottom) / 2, "text-anchor": "middle", class: "label",
    transform: `rotate(-90 14 ${(top + height - bottom) / 2})`}, axes).textContent = chart.y_label + units;
  // Below the lines, so that pointing at a point still shows its value: a drag starts on the empty plot.
  const area = element("rect", {x: left, y: top, width: width - left - right, height: height - top - bottom,
    class: "zoom-area"}, svg);
  const plot = element("g", {"clip-path": `url(#${id}-plot)`}, svg);
  if (chart.reference) {
    const y = py(chart.reference.value);
    element("line", {x1: left, x2: width - right, y1: y, y2: y, class: "reference"}, plot);
  }
  const groups = new Map();
  let offScale = 0;  // labels of points above the cut, one under another
  chart.lines.forEach((line, index) => {
    const colour = line.colour || COLOURS[index % COLOURS.length];
    const dashes = line.colour ? (line.dashed ? "6 3" : "none") : (index < COLOURS.length ? "none" : "6 3");
    const group = element("g", {class: "series", "data-name": line.name}, plot);
    if (state.hidden.has(line.name)) group.classList.add("hidden");
    if (state.focus !== null && state.focus !== line.name) group.classList.add("faded");
    groups.set(line.name, group);
    const at = (y) => (clipped ? Math.min(y, chart.y_max) : y);
    element("polyline", {points: line.points.map((p) => `${px(p[0])},${py(at(p[1]))}`).join(" "), stroke: colour,
      fill: "none", "stroke-width": 2, "stroke-dasharray": dashes}, group);
    // A dense line (a histogram's 256 bins) keeps its points for pointing at, unpainted.
    const dense = line.points.length > 60;
    for (const [x, y] of line.points) {
      const over = clipped && y > chart.y_max;
      const dot = over ? marker("^", px(x), py(chart.y_max) + 6, 5, colour, group)
        : marker(line.marker || "o", px(x), py(y), dense ? 2.5 : 3.5, colour, group);
      if (dense && !over) dot.setAttribute("fill-opacity", 0);
      element("title", {}, dot).textContent = `${line.name}: ${chart.x_label} ${x.toLocaleString("en")}, ` +
        `${chart.y_label} ${formatValue(y, chart.y_format)}`;
      if (over) {
        element("text", {x: px(x) - 10, y: py(chart.y_max) + 10 + 14 * offScale++, "text-anchor": "end",
          class: "off-scale", fill: colour}, group).textContent =
          `${line.name}: ${formatValue(y, chart.y_format)} (off the scale)`;
      }
    }
  });
  let row = 0;
  const legendAt = () => `translate(${width - right + 12},${top + 8 + row++ * LEGEND_ROW})`;
  const redraw = (change) => { change(); drawChart(container, chart, state); };
  let family = null;
  chart.lines.forEach((line, index) => {
    if (families.length > 1 && line.family && line.family !== family) {
      family = line.family;
      const members = chart.lines.filter((other) => other.family === family).map((other) => other.name);
      const header = element("g", {class: "legend-family", transform: legendAt()}, svg);
      element("text", {x: 0, y: 10}, header).textContent = family;
      element("title", {}, header).textContent = `${family}: click to hide or show all`;
      header.addEventListener("click", () => redraw(() => {
        const hide = members.some((name) => !state.hidden.has(name));
        members.forEach((name) => (hide ? state.hidden.add(name) : state.hidden.delete(name)));
      }));
    }
    const colour = line.colour || COLOURS[index % COLOURS.length];
    const dashes = line.colour ? (line.dashed ? "6 3" : "none") : (index < COLOURS.length ? "none" : "6 3");
    const entry = element("g", {class: "legend", transform: legendAt()}, svg);
    if (state.hidden.has(line.name)) entry.classList.add("off");
    element("line", {x1: 0, x2: 18, y1: 6, y2: 6, stroke: colour, "stroke-width": 3, "stroke-dasharray": dashes},
      entry);
    if (line.marker) marker(line.marker, 9, 6, 3.5, colour, entry);
    const name = line.name.length > LEGEND_NAME_MAX ? `${line.name.slice(0, LEGEND_NAME_MAX - 1)}…` : line.name;
    element("text", {x: 24, y: 10}, entry).textContent = name;
    element("title", {}, entry).textContent = `${line.name}: click to hide or show`;
    entry.addEventListener("click", () => redraw(() => {
      if (!state.hidden.delete(line.name)) state.hidden.add(line.name);
    }));
    // Pointing at a name brings its line forward and fades the others: lines that lie on top of one another.
    entry.addEventListener("mouseenter", () => groups.forEach((group, other) =>
      group.classList.toggle("faded", other !== line.name)));
    entry.addEventListener("mouseleave", () => groups.forEach((group) => group.classList.remove("faded")));
  });
  if (chart.reference && py(chart.reference.value) >= top && py(chart.reference.value) <= height - bottom) {
    // After the lines, so that its white outline keeps it readable over them.
    element("text", {x: width - right - 4, y: py(chart.reference.value) - 4, "text-anchor": "end",
      class: "reference-label"}, svg).textContent = `${chart.reference.label}: ${chart.reference.value.toFixed(3)}x`;
  }
  // Drag up or down across the plot to zoom into that range of y; double-click to zoom out.
  const band = element("rect", {x: left, width: width - left - right, height: 0, class: "zoom-band"}, svg);
  const toY = (event) => {
    const box = svg.getBoundingClientRect();
    const y = (event.clientY - box.top) * height / box.height;
    return Math.min(Math.max(y, top), height - bottom);
  };
  let start = null;
  area.addEventListener("pointerdown", (event) => {
    start = toY(event);
    try {
      area.setPointerCapture(event.pointerId);  // the drag goes on past the chart's edge
    } catch (error) {
      // A pointer that is not down (a scripted event) cannot be captured: the drag works inside the chart.
    }
  });
  area.addEventListener("pointermove", (event) => {
    if (start === null) return;
    const y = toY(event);
    band.setAttribute("y", Math.min(start, y));
    band.setAttribute("height", Math.abs(y - start));
  });
  area.addEventListener("pointerup", (event) => {
    const end = toY(event);
    if (start !== null && Math.abs(end - start) > 8) {
      const value = (y) => y1 - (y - top) / (height - top - bottom) * (y1 - y0);
      redraw(() => { state.zoom = [value(Math.max(start, end)), value(Math.min(start, end))]; });
    }
    start = null;
    band.setAttribute("height", 0);
  });
  area.addEventListener("dblclick", () => redraw(() => { state.zoom = null; }));
  const hint = document.createElement("p");
  hint.className = "chart-hint";
  hint.textContent = "Point at a name to bring its line forward, click it to hide or show it" +
    (families.length > 1 ? " (a family's name: all of them)" : "") +
    "; drag up or down across the chart to zoom into a range, double-click to zoom out." +
    (state.zoom ? " Zoomed in." : "");
  container.appendChild(hint);
}

// A cell's sort key: its data-value (tables written from the CSVs), else its text read as a number where it is
// one ("16,279,552", "99.9 %", "1.977x"), else its text.
function sortKey(cell) {
  const text = cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent.trim();
  const number = text.replace(/,/g, "").match(/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?\s*(%|x|×|s|ms)?$/i);
  return number ? {number: parseFloat(number[0]), text} : {number: NaN, text};
}

function sortable(table) {
  table.querySelectorAll("thead th").forEach((header, column) => {
    header.addEventListener("click", () => {
      const ascending = header.dataset.order !== "ascending";
      table.querySelectorAll("thead th").forEach((other) => delete other.dataset.order);
      header.dataset.order = ascending ? "ascending" : "descending";
      const body = table.tBodies[0];
      const keys = new Map([...body.rows].map((row) => [row, sortKey(row.cells[column])]));
      const rows = [...body.rows].sort((a, b) => {
        const [p, q] = [keys.get(a), keys.get(b)];
        // Numbers before words ("-", "never"), empty cells last whichever the direction.
        if (!p.text || !q.text) return !p.text - !q.text;
        const [m, n] = [Number.isFinite(p.number), Number.isFinite(q.number)];
        const order = m && n ? p.number - q.number : m !== n ? (m ? -1 : 1) : p.text.localeCompare(q.text);
        return ascending ? order : -order;
      });
      rows.forEach((row) => body.appendChild(row));
    });
  });
}

CHARTS.forEach((chart, index) => drawChart(document.getElementById(`chart-${index}`), chart));
document.querySelectorAll("table[data-sortable]").forEach(sortable);
