/* The dot-product playground: a query and S keys in the plane, their scores, the softmax
   weights as bars and the weighted sum of the values as one more vector. Point 0 is the
   query, point 1 + j is key j. The page's numbers are what this code computes:
   scores c * (q . k_j), weights softmax over j, output sum_j w_j v_j. */
var svg = find("pg-svg");
/* The plot is a square of VB units; the axis numbers sit in margins outside it (LM on the
   left, BM below), where only the label of a point at the grid's edge reaches them. */
var VB = 380, PAD = 14, LM = 22, BM = 16, LO = D.lo, HI = D.hi, U = (VB - 2 * PAD) / (HI - LO);
var S = D.keys.length, FIXED_V = D.values !== null;
var P = [D.q.slice()].concat(D.keys.map(function (k) { return k.slice(); }));
var st = { c: D.scale, drag: -1, w: [], out: [0, 0] };
var slider = find("pg-scale"), scaleOut = find("pg-scale-out");

function px(x) { return LM + PAD + (x - LO) * U; }
function py(y) { return PAD + (HI - y) * U; }
var OX = px(0), OY = py(0);
function snap(v) {
  var r = Math.round(v * 10) / 10;
  return Math.max(LO, Math.min(HI, r === 0 ? 0 : r));
}
function pair(p) { return "(" + fixed(p[0], 1) + ", " + fixed(p[1], 1) + ")"; }
function sig(v) { return String(Number(v.toPrecision(3))); }

svg.setAttribute("viewBox", "0 0 " + (LM + VB) + " " + (VB + BM));
var grid = el("g", { "aria-hidden": "true" }, svg);
var gstep = HI - LO > 24 ? 2 : 1, step = HI - LO > 12 ? 2 * gstep : gstep, t, ticks = [];
for (t = LO; t <= HI; t += gstep) {
  var cls = t === 0 ? "pg-axis" : "pg-gridline";
  el("line", { x1: px(t), y1: py(LO), x2: px(t), y2: py(HI), "class": cls }, grid);
  el("line", { x1: px(LO), y1: py(t), x2: px(HI), y2: py(t), "class": cls }, grid);
  if (t % step === 0 && t > LO && t < HI) {
    ticks.push(el("text", { x: px(t), y: py(LO) + 13, "text-anchor": "middle",
                            "class": "pg-tick" }, grid));
    ticks.push(el("text", { x: px(LO) - 5, y: py(t) + 4, "text-anchor": "end",
                            "class": "pg-tick" }, grid));
    ticks[ticks.length - 2].textContent = ticks[ticks.length - 1].textContent = String(t);
  }
}

function arrow(colour, cls) {
  var g = el("g", { "class": "pg-vec " + cls, "aria-hidden": "true" }, svg);
  return {
    g: g,
    line: el("line", { "class": "pg-shaft", stroke: colour, x1: OX, y1: OY }, g),
    head: el("polygon", { fill: colour }, g)
  };
}
function drawArrow(a, p) { pointArrow(a, OX, OY, px(p[0]), py(p[1])); }

var names = [D.qLabel].concat(D.labels), colours = [D.qColour].concat(D.colours);
var vmarks = [], i, j;
if (FIXED_V) {
  for (j = 0; j < S; j++) {
    var vm = el("g", { "aria-hidden": "true" }, svg);
    el("rect", { x: -5, y: -5, width: 10, height: 10, transform: "rotate(45)",
                 fill: D.colours[j], "class": "pg-vmark" }, vm);
    el("text", { x: 8, y: 14, fill: D.colours[j], "class": "pg-lab" }, vm).textContent =
      "v" + j;
    vm.setAttribute("transform", "translate(" + px(D.values[j][0]) + " " +
                    py(D.values[j][1]) + ")");
    vmarks.push(vm);
  }
}
var arrows = [], handles = [], tips = [], discs = [];
for (i = 0; i <= S; i++) { arrows.push(arrow(colours[i], i === 0 ? "pg-vq" : "pg-vk")); }
var outArrow = arrow(D.outColour, "pg-vo");
/* Keys first, the query last: drawn on top, so it can be grabbed where a key coincides
   with it (the exact match). */
for (var n = 1; n <= S + 1; n++) {
  i = n % (S + 1);
  var h = el("g", { "class": "pg-handle", tabindex: 0, role: "button",
                    "aria-roledescription": "movable point",
                    "aria-describedby": D.id + "-help", "data-p": i }, svg);
  /* The ring is what a finger grabs: 32 units, 26 px where the plot is shrunk to a
     phone's 328 px (WCAG 2.5.8 asks 24). */
  el("circle", { r: 16, "class": "pg-ring" }, h);
  discs[i] = el("circle", { r: 7, fill: colours[i], "class": "pg-dot" }, h);
  var short = names[i].length > 18 ? names[i].slice(0, 17) + "\u2026" : names[i];
  var tip = el("text", { x: 10, y: -9, "class": "pg-lab" }, h);
  tip.textContent = short;
  handles[i] = h;
  tips[i] = tip;
}

var body = find("pg-tbody"), rows = [];
for (j = 0; j < S; j++) {
  var tr = make("tr");
  var th = make("th");
  th.setAttribute("scope", "row");
  var sw = make("span", "pg-sw");
  sw.style.backgroundColor = D.colours[j];
  th.appendChild(sw);
  th.appendChild(make("span", "pg-tok", D.labels[j]));
  th.title = D.labels[j];
  tr.appendChild(th);
  var cells = [make("td", "pg-num"), make("td", "pg-num"), make("td", "pg-num"),
               make("td", "pg-wcell pg-num")];
  var bar = make("span", "pg-bar"), fill = make("span", "pg-fill"), wv = make("span", "pg-w");
  fill.style.backgroundColor = D.colours[j];
  bar.setAttribute("aria-hidden", "true");
  bar.appendChild(fill);
  cells[3].appendChild(bar);
  cells[3].appendChild(wv);
  /* The weight comes right after the key's name, so a narrow screen shows it first. */
  [3, 0, 1, 2].forEach(function (c) { tr.appendChild(cells[c]); });
  body.appendChild(tr);
  rows.push({ tr: tr, at: cells[0], dot: cells[1], sc: cells[2], fill: fill, w: wv });
}
var qText = find("pg-qxy"), outText = find("pg-outxy"), say = find("pg-say");

function compute() {
  var q = P[0], dots = [], m = -Infinity, sum = 0, e = [], w = [], k;
  for (k = 0; k < S; k++) {
    dots.push(q[0] * P[1 + k][0] + q[1] * P[1 + k][1]);
    m = Math.max(m, st.c * dots[k]);
  }
  for (k = 0; k < S; k++) { e.push(Math.exp(st.c * dots[k] - m)); sum += e[k]; }
  var out = [0, 0];
  for (k = 0; k < S; k++) {
    w.push(e[k] / sum);
    var v = FIXED_V ? D.values[k] : P[1 + k];
    out[0] += w[k] * v[0];
    out[1] += w[k] * v[1];
  }
  return { dots: dots, w: w, out: out };
}

/* Where point p's label may go, best first, as directions in the plot (up is +): beside the
   tip, off the line of the vector, on its anticlockwise side (side 1) or its clockwise side
   (side -1), so that the query's label and the label of a key lying along it do not
   overlap; then the other side; then right, left, above and below the point; then its four
   diagonals; then, where the drawing is crowded near the point, twice as far: below, above,
   right and left first, where the label stays centred on its point (a key just above an
   axis is labelled under it, clear of the axis). */
function spots(p, side) {
  var n = Math.sqrt(p[0] * p[0] + p[1] * p[1]);
  var off = n > 0 ? [[-side * p[1] / n, side * p[0] / n], [side * p[1] / n, -side * p[0] / n]]
    : [[0.7, 0.7]];
  var near = off.concat([[1, 0], [-1, 0], [0, 1], [0, -1], [0.7, -0.7], [-0.7, -0.7],
                         [0.7, 0.7], [-0.7, 0.7]]);
  var far = [[0, -1], [0, 1], [1, 0], [-1, 0]].concat(off, near.slice(-4));
  return near.concat(far.map(function (d) { return [2 * d[0], 2 * d[1]]; }));
}
function put(text, d) {
  var ox = 13 * d[0], oy = -13 * d[1];
  text.setAttribute("text-anchor", d[0] < -0.15 ? "end" : (d[0] > 0.15 ? "start" : "middle"));
  text.setAttribute("x", ox);
  text.setAttribute("y", oy + (oy > 0 ? 9 : 0) + (Math.abs(ox) > 9 ? 4 : 0));
}
/* The box in the drawing of an element of point k's handle (its label, its dot), which is
   drawn relative to the point. */
function boxAt(t, k) {
  var b = bbox(t);
  return [b[0] + px(P[k][0]), b[1] + py(P[k][1]), b[2], b[3]];
}
function labelBox(k) { return boxAt(tips[k], k); }
/* The labels, the query's first: each at its first spot clear of the labels placed before
   it, of the other points' dots, of every arrow (the output's included) and of the two axes
   (with the label's white halo), or, where the drawing crowds so that none is, at the spot
   that covers them least: another label counts a hundred times what a dot does, an arrow
   as a band 6 units wide and an axis as one 3 units wide. */
function placeLabels(out) {
  var placed = [], ends = P.concat([out]), k;
  for (k = 0; k <= S; k++) {
    placeBest(spots(P[k], k === 0 ? -1 : 1), function (d) { put(tips[k], d); }, function () {
      var box = labelBox(k), cover = 0;
      placed.forEach(function (o) { cover += 100 * overlap(box, o, 2); });
      ends.forEach(function (e, j) {
        /* not its own dot, nor a dot on its own point (the exact match's ring) */
        var same = e[0] === P[k][0] && e[1] === P[k][1];
        if (!same && j <= S) { cover += overlap(box, boxAt(discs[j], j), 1); }
        cover += 6 * crossing(box, 1, OX, OY, px(e[0]), py(e[1]));
      });
      cover += 3 * (crossing(box, 2, px(LO), OY, px(HI), OY) +
                    crossing(box, 2, OX, py(LO), OX, py(HI)));
      return cover + 100 * (box[2] * box[3] - overlap(box, FRAME, 0));  /* cut off */
    });
    moveInto(tips[k], labelBox(k), FRAME);
    placed.push(labelBox(k));
  }
  return placed;
}

/* The drawing's box, 2 units in from its edges (a label's white halo): a label beyond it
   is cut off, and moved back inside where no spot was. */
var FRAME = [2, 2, LM + VB - 4, VB + BM - 4];

/* An axis number that a point's label would half cover is hidden while the label is there:
   the label is what the reader is looking at. A label covers its box and the white halo
   around it (HALO, half the width of its outline). */
function hideTicksUnderLabels(boxes) {
  var HALO = 2;
  ticks.forEach(function (tick) {
    var b = bbox(tick), hit = boxes.some(function (o) {
      return o[2] > 0 && overlap(o, b, HALO) > 0;
    });
    tick.style.visibility = hit ? "hidden" : "";
  });
}

function render() {
  var r = compute(), k, top = 0;
  st.w = r.w;
  st.out = r.out;
  for (k = 0; k <= S; k++) {
    var p = P[k];
    drawArrow(arrows[k], p);
    handles[k].setAttribute("transform", "translate(" + px(p[0]) + " " + py(p[1]) + ")");
    handles[k].setAttribute("data-x", String(p[0]));
    handles[k].setAttribute("data-y", String(p[1]));
    handles[k].setAttribute("aria-label", (k === 0 ? "query " : "key ") + names[k] +
                            " at " + pair(p));
    /* A key on the query (the exact match) is drawn as a wider disc under the query's,
       a ring of its colour around it, so it stays in sight. */
    if (k > 0) {
      discs[k].setAttribute("r", p[0] === P[0][0] && p[1] === P[0][1] ? 11 : 7);
    }
  }
  drawArrow(outArrow, r.out);
  hideTicksUnderLabels(placeLabels(r.out));
  for (k = 0; k < S; k++) { if (r.w[k] > r.w[top]) { top = k; } }
  for (k = 0; k < S; k++) {
    var row = rows[k];
    row.at.textContent = pair(P[1 + k]);
    row.dot.textContent = fixed(r.dots[k], 2);
    row.dot.setAttribute("data-v", String(r.dots[k]));
    row.sc.textContent = fixed(st.c * r.dots[k], 3);
    row.sc.setAttribute("data-v", String(st.c * r.dots[k]));
    row.fill.style.width = (100 * r.w[k]).toFixed(2) + "%";
    row.w.textContent = fixed(r.w[k], 4);
    row.w.setAttribute("data-w", String(r.w[k]));
    row.tr.classList.toggle("pg-top", k === top);
  }
  qText.textContent = pair(P[0]);
  outText.textContent = "(" + fixed(r.out[0], 2) + ", " + fixed(r.out[1], 2) + ")";
  outText.setAttribute("data-x", String(r.out[0]));
  outText.setAttribute("data-y", String(r.out[1]));
  var cs = sig(st.c);
  scaleOut.textContent = "c = " + cs + ", temperature 1/c = " + sig(1 / st.c);
  slider.setAttribute("aria-valuetext", "c = " + cs);
  root.setAttribute("data-scale", String(st.c));
  var text = "Largest weight: " + D.labels[top] + ", " + fixed(r.w[top], 4) + ".";
  if (say.textContent !== text) { say.textContent = text; }
}

function setScale(c) {
  st.c = c;
  slider.value = String(Math.log(c) / Math.LN10);
  render();
}
slider.addEventListener("input", function () {
  st.c = Math.pow(10, Number(slider.value));
  render();
});
find("pg-sqrt").addEventListener("click", function () { setScale(1 / Math.sqrt(D.dk)); });
find("pg-one").addEventListener("click", function () { setScale(1); });
find("pg-reset").addEventListener("click", function () {
  P = [D.q.slice()].concat(D.keys.map(function (k) { return k.slice(); }));
  setScale(D.scale);
});

function pointAt(ev) {
  var box = svg.getBoundingClientRect(), f = (LM + VB) / box.width;
  return [snap(((ev.clientX - box.left) * f - LM - PAD) / U + LO),
          snap(HI - ((ev.clientY - box.top) * f - PAD) / U)];
}
handles.forEach(function (h, k) {
  h.addEventListener("pointerdown", function (ev) {
    if (ev.button !== 0) { return; }
    ev.preventDefault();
    st.drag = k;
    h.classList.add("pg-dragging");
    if (h.setPointerCapture) { h.setPointerCapture(ev.pointerId); }
    h.focus();
  });
  h.addEventListener("pointermove", function (ev) {
    if (st.drag !== k) { return; }
    var p = pointAt(ev);
    if (p[0] !== P[k][0] || p[1] !== P[k][1]) { P[k] = p; render(); }
  });
  /* A touch that starts on a point drags it; anywhere else on the plot (the grid, a
     label) it scrolls the page, as on text. The CSS touch-action of an SVG part does not
     reach the browser, so the point's touchstart cancels the scroll instead. */
  h.addEventListener("touchstart", function (ev) { ev.preventDefault(); },
                     { passive: false });
  function end() { st.drag = -1; h.classList.remove("pg-dragging"); }
  h.addEventListener("pointerup", end);
  h.addEventListener("pointercancel", end);
  h.addEventListener("keydown", function (ev) {
    var d = ev.shiftKey ? 1 : 0.1, p = P[k].slice();
    switch (ev.key) {
      case "ArrowLeft": p[0] -= d; break;
      case "ArrowRight": p[0] += d; break;
      case "ArrowUp": p[1] += d; break;
      case "ArrowDown": p[1] -= d; break;
      default: return;
    }
    ev.preventDefault();
    P[k] = [snap(p[0]), snap(p[1])];
    render();
  });
});

start();
slider.min = String(D.sliderMin);
slider.max = String(D.sliderMax);
setScale(D.scale);
ready();
