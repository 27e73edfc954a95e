// coop's memory timeline: draws the pieces of #timeline-data as SVG rects (address up, records
// right), with hover, wheel zoom, drag pan. Plain JS, no libraries: the page works offline.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("timeline-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const col = {};
  data.columns.forEach((name, i) => { col[name] = i; });
  const H = 1000;                       // the address axis in view units: 0 at the arena's top
  const cap = Math.max(data.capacity, 1);
  const plot = document.getElementById("plot");
  const view = document.getElementById("view");
  const axes = document.getElementById("axes");
  const tip = document.getElementById("tooltip");
  const range = document.getElementById("range");
  const full = {x: 0, w: Math.max(data.records, 1), y: 0, h: H};
  let box = Object.assign({}, full);

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }
  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let u = 0;
    while (Math.abs(n) >= 1024 && u < units.length - 1) { n /= 1024; u++; }
    return (u ? n.toFixed(n < 10 ? 2 : 1) : String(n)) + " " + units[u];
  }
  function ns(c) {
    if (c >= 1e6) return (c / 1e6).toFixed(3) + " ms";
    if (c >= 1e3) return (c / 1e3).toFixed(2) + " \u00b5s";
    return c.toFixed(1) + " ns";
  }
  function yOf(offset, size) { return (cap - offset - size) / cap * H; }

  // ---- the pieces and their marks ------------------------------------------------------------
  const pieces = el("g", {id: "pieces"}, view);
  const marks = el("g", {id: "marks"}, view);
  data.pieces.forEach((p, i) => {
    const kind = data.kinds[p[col.kind]], begin = data.marks[p[col.begin]];
    const end = data.marks[p[col.end]];
    const x = p[col.t0], w = Math.max(p[col.t1] - p[col.t0], 1e-6);
    const y = yOf(p[col.offset], p[col.size]), h = p[col.size] / cap * H;
    el("rect", {class: "piece k-" + kind, x: x, y: y, width: w, height: h, "data-i": i,
                "data-offset": p[col.offset], "data-size": p[col.size], "data-kind": kind,
                "data-begin": begin, "data-end": end, "data-op": data.ops[p[col.op]],
                "data-source": p[col.source], "data-to": p[col.to]}, pieces);
    if (begin === "recomputed" || begin === "moved" || begin === "fetched")
      el("line", {class: "mark m-" + begin, x1: x, x2: x, y1: y, y2: y + h, "data-i": i}, marks);
    if (p[col.source] >= 0)      // moved: a line from the middle of the old range to the new
      el("line", {class: "link m-moved", x1: x, x2: x, y1: yOf(p[col.source], p[col.size]) + h / 2,
                  y2: y + h / 2, "data-i": i}, marks);
    if (end === "evicted" || end === "moved" || end === "offloaded")
      el("line", {class: "mark m-" + end, x1: x + w, x2: x + w, y1: y, y2: y + h, "data-i": i},
         marks);
  });

  // ---- per record, one row each: recomputes, evictions, moves, offloads to the host tier and
  // copies back from it
  const lane = document.getElementById("lane");
  const most = Math.max(1, ...data.counts.map((m) => Math.max(m[1], m[2], m[3], m[4], m[5])));
  const laneRows = [["recomputed", 1, 0], ["evicted", 2, 1], ["moved", 3, 2], ["offloaded", 4, 3],
                    ["fetched", 5, 4]];
  data.counts.forEach((m) => {
    for (const [name, k, row] of laneRows) {
      if (!m[k]) continue;
      const h = 0.25 + 0.75 * m[k] / most;
      el("rect", {class: "lane-mark m-" + name, x: m[0], width: 1, y: row + 1 - h, height: h,
                  "data-record": m[0], "data-count": m[k], "data-mark": name}, lane);
    }
  });

  // ---- hover -----------------------------------------------------------------------------------
  function describe(i) {
    const p = data.pieces[i];
    const kind = data.kinds[p[col.kind]], op = data.ops[p[col.op]];
    const at = (n) => " offset " + n.toLocaleString("en-US");
    let begin = data.marks[p[col.begin]], end = data.marks[p[col.end]];
    if (p[col.source] >= 0) begin += " from" + at(p[col.source]);   // moved here from there
    if (p[col.to] >= 0) end += " to" + at(p[col.to]);
    const lines = [(op || "(no op)") + " \u2014 " + kind,
      p[col.nbytes].toLocaleString("en-US") + " bytes (" + bytes(p[col.size]) +
        " in the arena) at offset " + p[col.offset].toLocaleString("en-US"),
      kind === "constant" ? "constant: never evicted" : "cost " + ns(p[col.cost]),
      "records " + p[col.t0].toFixed(2) + " \u2192 " + p[col.t1].toFixed(2) +
        (begin ? ", " + begin : "") + (end ? ", then " + end : ", alive at the end")];
    return lines.join("\n");
  }
  pieces.addEventListener("mouseover", (e) => {
    const i = e.target.getAttribute("data-i");
    if (i === null) return;
    tip.textContent = describe(+i);
    tip.hidden = false;
    e.target.classList.add("hover");
  });
  pieces.addEventListener("mousemove", (e) => {
    const r = plot.getBoundingClientRect();
    const left = e.clientX - r.left + 14, top = e.clientY - r.top + 14;
    tip.style.left = Math.min(left, r.width - tip.offsetWidth - 4) + "px";
    tip.style.top = Math.min(top, r.height - tip.offsetHeight - 4) + "px";
  });
  pieces.addEventListener("mouseout", (e) => {
    tip.hidden = true;
    if (e.target.classList) e.target.classList.remove("hover");
  });

  // ---- axes, zoom and pan ------------------------------------------------------------------
  function ticks(lo, hi, n) {
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(v);
    return out;
  }
  function draw() {
    view.setAttribute("viewBox", [box.x, box.y, box.w, box.h].join(" "));
    lane.setAttribute("viewBox", [box.x, 0, box.w, 5].join(" "));
    const vx = +view.getAttribute("x"), vy = +view.getAttribute("y");
    const vw = +view.getAttribute("width"), vh = +view.getAttribute("height");
    axes.textContent = "";
    for (const t of ticks(box.x, box.x + box.w, 8)) {
      const px = vx + (t - box.x) / box.w * vw;
      el("line", {x1: px, x2: px, y1: vy + vh, y2: vy + vh + 5, class: "tick"}, axes);
      el("text", {x: px, y: vy + vh + 18, class: "tick-label", "text-anchor": "middle"}, axes)
        .textContent = Number.isInteger(t) ? t : t.toFixed(2);
    }
    const a0 = cap * (1 - (box.y + box.h) / H), a1 = cap * (1 - box.y / H);
    // address ticks on round numbers of the largest binary unit the visible range spans
    let unit = 1, name = "B";
    for (const [u, n] of [[1 << 10, "KiB"], [1 << 20, "MiB"], [1 << 30, "GiB"]])
      if (a1 - a0 >= 2 * u) { unit = u; name = n; }
    for (const a of ticks(a0 / unit, a1 / unit, 6)) {
      const py = vy + (yOf(a * unit, 0) - box.y) / box.h * vh;
      el("line", {x1: vx - 5, x2: vx, y1: py, y2: py, class: "tick"}, axes);
      el("text", {x: vx - 8, y: py + 4, class: "tick-label", "text-anchor": "end"}, axes)
        .textContent = +a.toFixed(3) + " " + name;
    }
    const ly = +lane.getAttribute("y");
    ["recomputes", "evictions", "moves", "offloads", "copies back"].forEach((label, row) => {
      el("text", {x: vx - 8, y: ly + row * 12 + 9, class: "lane-label", "text-anchor": "end"},
         axes).textContent = label;
    });
    el("text", {x: vx + vw / 2, y: vy + vh + 36, class: "axis-label", "text-anchor": "middle"},
       axes).textContent = "record of the trace";
    el("text", {x: 12, y: vy + vh / 2, class: "axis-label", "text-anchor": "middle",
                transform: "rotate(-90 12 " + (vy + vh / 2) + ")"}, axes).textContent = "address";
    range.textContent = "records " + box.x.toFixed(2) + " \u2013 " + (box.x + box.w).toFixed(2) +
      " of " + data.records + "; addresses " + bytes(Math.round(a0)) + " \u2013 " +
      bytes(Math.round(a1));
    range.setAttribute("data-x0", box.x);
    range.setAttribute("data-x1", box.x + box.w);
  }
  function clamp() {
    box.w = Math.min(Math.max(box.w, 1e-3), full.w);
    box.h = Math.min(Math.max(box.h, 1e-3), full.h);
    box.x = Math.min(Math.max(box.x, full.x), full.x + full.w - box.w);
    box.y = Math.min(Math.max(box.y, full.y), full.y + full.h - box.h);
  }
  function zoom(factor, fx, fy, vertical) {   // fx, fy: the fixed point, as shares of the view
    if (vertical) {
      const h = box.h / factor;
      box.y += (box.h - h) * fy;
      box.h = h;
    } else {
      const w = box.w / factor;
      box.x += (box.w - w) * fx;
      box.w = w;
    }
    clamp();
    draw();
  }
  function share(e) {
    const r = view.getBoundingClientRect();
    return [(e.clientX - r.left) / r.width, (e.clientY - r.top) / r.height];
  }
  plot.addEventListener("wheel", (e) => {
    e.preventDefault();
    const [fx, fy] = share(e);
    zoom(e.deltaY < 0 ? 1.25 : 0.8, fx, fy, e.shiftKey);
  }, {passive: false});
  let drag = null;
  plot.addEventListener("mousedown", (e) => {
    drag = {x: e.clientX, y: e.clientY, box: Object.assign({}, box)};
  });
  window.addEventListener("mouseup", () => { drag = null; });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const r = view.getBoundingClientRect();
    box.x = drag.box.x - (e.clientX - drag.x) / r.width * box.w;
    box.y = drag.box.y - (e.clientY - drag.y) / r.height * box.h;
    clamp();
    draw();
  });
  function reset() { box = Object.assign({}, full); draw(); }
  plot.addEventListener("dblclick", reset);
  document.getElementById("zoom-in").addEventListener("click", () => zoom(2, 0.5, 0.5, false));
  document.getElementById("zoom-out").addEventListener("click", () => zoom(0.5, 0.5, 0.5, false));
  document.getElementById("zoom-in-y").addEventListener("click", () => zoom(2, 0.5, 0.5, true));
  document.getElementById("zoom-out-y").addEventListener("click", () => zoom(0.5, 0.5, 0.5, true));
  document.getElementById("reset").addEventListener("click", reset);
  draw();
  document.body.setAttribute("data-ready", "1");
})();
