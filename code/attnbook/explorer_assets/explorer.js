(function () {
"use strict";
var D = __DATA__;
var root = document.getElementById(D.id);
if (!root || root.getAttribute("data-attnx-ready") === "1") { return; }
root.setAttribute("data-attnx-ready", "1");
var NL = D.layers, NH = D.heads, SC = D.scale, DIG = D.digits;
var VMIN = D.vmin, VMAX = D.vmax, LUT = D.lut;
var SETS = [D].concat(D.more || []);
var CAUSAL = D.causal === true, MASKED = "masked: key after the query";
var L, S, T, W, C, QT, KT;
var st = { set: 0, view: "w", layer: 0, head: 0, row: 0, col: 0, query: -1, shown: null };
var RGB = [];
var k, i, j, h;
var B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
function numbers(x) {
  if (x === null || typeof x !== "string") { return x; }
  var out = [], acc = 0, bits = 0;
  for (var m = 0; m < x.length; m++) {
    acc = ((acc << 6) | B64.indexOf(x.charAt(m))) & 0xffffff;
    bits += 6;
    if (bits >= 8) { bits -= 8; out.push((acc >> bits) & 255); }
  }
  return out;
}
for (k = 0; k < SETS.length; k++) {
  SETS[k].w = numbers(SETS[k].w);
  SETS[k].c = numbers(SETS[k].c);
}
for (k = 0; k < 256; k++) {
  RGB.push([parseInt(LUT.substr(6 * k, 2), 16), parseInt(LUT.substr(6 * k + 2, 2), 16),
            parseInt(LUT.substr(6 * k + 4, 2), 16)]);
}
function find(cls) { return root.querySelector("." + cls); }
function make(tag, cls, text) {
  var e = document.createElement(tag);
  if (cls) { e.className = cls; }
  if (text !== undefined) { e.textContent = text; }
  return e;
}
function addDiv(parent, cls, role) {
  var e = make("div", cls);
  e.setAttribute("role", role);
  parent.appendChild(e);
  return e;
}
function masked(r, c) { return CAUSAL && c > r; }
function value(l, hd, r, c) {
  var a = st.view === "c" && C ? C : W;
  if (!CAUSAL) { return a[((l * NH + hd) * L + r) * S + c] / SC; }
  return c > r ? 0 : a[(l * NH + hd) * T + r * (r + 1) / 2 + c] / SC;
}
function lutIndex(v, lo, hi) {
  var t = (v - lo) / (hi - lo);
  if (!(t > 0)) { t = 0; }
  if (t > 1) { t = 1; }
  return Math.floor(t * 255 + 0.5);
}
/* The stretched scale runs to the head's largest weight. In a causal map the first query
   sees one key, so its weight is 1 in every head whatever the head does: that row is left
   out, or every head would stretch to 1 and the option would change nothing. */
function span(l, hd) {
  if (scaleSel.value !== "head") { return [VMIN, VMAX]; }
  var top = -Infinity;
  for (var r = CAUSAL && L > 1 ? 1 : 0; r < L; r++) {
    for (var c = 0; c < S; c++) { if (!masked(r, c)) { top = Math.max(top, value(l, hd, r, c)); } }
  }
  return top > VMIN ? [VMIN, top] : [VMIN, VMAX];
}
function fmt(v) { return v.toFixed(DIG); }
function tick(v) { return String(Number(v.toPrecision(3))); }
function barWidth(v) {
  var lo = Math.min(0, VMIN), t = (v - lo) / (VMAX - lo);
  if (!(t > 0)) { t = 0; }
  if (t > 1) { t = 1; }
  return (100 * t).toFixed(2) + "%";
}

find("attnx-nojs").hidden = true;
if (D.title) {
  find("attnx-title").textContent = D.title;
  find("attnx-title").hidden = false;
  root.setAttribute("aria-label", "Attention explorer: " + D.title);
}
var layerSel = find("attnx-layer"), headSel = find("attnx-head"), querySel = find("attnx-query");
var scaleSel = find("attnx-scale"), setSel = find("attnx-sentence"), viewSel = find("attnx-view");
scaleSel.options[0].textContent = "fixed, " + tick(VMIN) + " to " + tick(VMAX);
scaleSel.options[1].textContent = "stretched per head";
function option(sel, val, text) {
  var o = make("option", null, text);
  o.value = String(val);
  sel.appendChild(o);
}
for (i = 0; i < NL; i++) { option(layerSel, i, D.layerNames[i]); }
for (i = 0; i < NH; i++) { option(headSel, i, D.headNames[i]); }
for (i = 0; i < SETS.length; i++) { option(setSel, i, SETS[i].label || "sentence " + (i + 1)); }
if (SETS.length > 1) { find("attnx-ctl-sentence").hidden = false; }
for (i = 0; i < SETS.length; i++) { if (SETS[i].c) { find("attnx-ctl-view").hidden = false; } }
if (NL < 2) { find("attnx-ctl-layer").hidden = true; }
if (NH < 2) { find("attnx-ctl-head").hidden = true; }

var grid = find("attnx-grid"), cells = [], qbtns = [], colheads = [];
var ov = find("attnx-ov"), toggle = find("attnx-toggle"), tiles = [], canvases = [];
var barsTitle = find("attnx-bars-title"), barsList = find("attnx-bars-list"), bars = [];
var PICK = barsTitle.textContent;  /* what the bars say while no query is picked */
var INSET = 28;  /* px of the panel's padding, left and right */
/* Cells of at most 28 px that share at most 448 px, and on a narrow screen (a phone) the
   width beside the row labels, down to 9 px a cell; a wider map scrolls in its own box.
   Labels shrink with the cells, to 9 px at the least: a row is never lower than 11 px, what
   a 9 px label needs, and where columns are narrower than that only every second (third)
   key is labelled, so no label runs into the next. */
function fit() {
  if (L === undefined) { return; }
  var room = root.clientWidth - INSET - 100, n = Math.max(L, S);
  room = room > 0 ? Math.min(448, room) : 448;
  var LABEL = 11;  /* px a 9 px label needs, across its line */
  var size = Math.max(9, Math.min(28, Math.floor(room / n))), line = Math.max(size, LABEL);
  var every = Math.ceil(LABEL / size), font = Math.min(12, Math.max(9, Math.floor(line / 1.25)));
  root.style.setProperty("--attnx-cell", size + "px");
  root.style.setProperty("--attnx-row", line + "px");
  root.style.setProperty("--attnx-font", font + "px");
  for (var k = 0; k < colheads.length; k++) {
    colheads[k].classList.toggle("attnx-thin", k % every !== 0);
  }
  balanceTiles();
}
/* The head tiles in rows of equal length, or nearly: as few rows as the column allows, and
   as few tiles to a row as that number of rows needs (nine heads in a 4-wide column make
   three rows of three, not 4, 4 and 1). */
function balanceTiles() {
  var GAP = 6, step = tiles.length ? tiles[0].offsetWidth + GAP : 0;
  if (step <= GAP) { return; }
  var across = Math.max(1, Math.floor((root.clientWidth - INSET + GAP) / step));
  var rows = Math.ceil(tiles.length / across);
  ov.style.maxWidth = rows > 1 ? Math.ceil(tiles.length / rows) * step - GAP + 1 + "px" : "";
}
window.addEventListener("resize", fit);
function build() {
var d = SETS[st.set];
L = d.rows; S = d.cols; T = L * (L + 1) / 2; W = d.w; C = d.c; QT = d.tokens;
KT = d.keys || d.tokens;
cells = []; qbtns = []; colheads = []; bars = [];
grid.textContent = ""; barsList.textContent = ""; querySel.textContent = "";
st.row = 0; st.col = 0; st.query = -1; st.shown = null;
fit();
option(querySel, -1, "(none)");
for (i = 0; i < L; i++) { option(querySel, i, i + ": " + QT[i]); }
var hrow = addDiv(grid, "attnx-row attnx-colheads", "row");
addDiv(hrow, "attnx-corner", "columnheader").textContent = "query \u2193 key \u2192";
for (j = 0; j < S; j++) {
  var ch = addDiv(hrow, "attnx-colhead", "columnheader");
  ch.title = KT[j];
  ch.appendChild(make("span", "attnx-vtext", KT[j]));
  colheads.push(ch);
}
fit();
for (i = 0; i < L; i++) {
  var row = addDiv(grid, "attnx-row", "row");
  var qb = make("button", "attnx-qbtn", QT[i]);
  qb.type = "button";
  qb.tabIndex = -1;
  qb.title = QT[i];
  qb.setAttribute("data-q", String(i));
  qb.setAttribute("aria-pressed", "false");
  qbtns.push(qb);
  addDiv(row, "attnx-rowhead", "rowheader").appendChild(qb);
  for (j = 0; j < S; j++) {
    var c = addDiv(row, "attnx-cell", "gridcell");
    c.tabIndex = (i === 0 && j === 0) ? 0 : -1;
    c.setAttribute("data-q", String(i));
    c.setAttribute("data-k", String(j));
    if (masked(i, j)) { c.classList.add("attnx-masked"); }
    cells.push(c);
  }
}
for (h = 0; h < canvases.length; h++) {
  canvases[h].width = S;
  canvases[h].height = L;
  canvases[h].style.height = Math.max(8, Math.round(60 * L / S)) + "px";
}
for (j = 0; j < S; j++) {
  var br = addDiv(barsList, "attnx-bar-row", "listitem");
  var fill = make("span", "attnx-bar-fill");
  fill.style.backgroundColor = D.bar;
  var track = make("span", "attnx-bar-track");
  track.appendChild(fill);
  var bv = make("span", "attnx-bar-val");
  var bk = make("span", "attnx-bar-key", KT[j]);
  bk.title = KT[j];
  br.appendChild(bk);
  br.appendChild(track);
  br.appendChild(bv);
  bars.push([fill, bv, track]);
}
if (out) { out.hint.hidden = false; out.body.hidden = true; }
barsList.hidden = true;
}
var out = null;
for (h = 0; h < NH; h++) {
  var tile = make("button", "attnx-tile");
  tile.type = "button";
  tile.setAttribute("data-h", String(h));
  tile.setAttribute("aria-pressed", "false");
  tile.setAttribute("aria-label", D.headNames[h]);
  var cv = document.createElement("canvas");
  cv.setAttribute("aria-hidden", "true");
  tile.appendChild(cv);
  tile.appendChild(make("span", "attnx-tile-label", D.headNames[h]));
  tiles.push(tile);
  canvases.push(cv);
  ov.appendChild(tile);
}
if (NH < 2) { ov.hidden = true; toggle.hidden = true; }
balanceTiles();

var stops = [];
for (k = 0; k <= 16; k++) {
  stops.push("#" + LUT.substr(6 * Math.round(255 * k / 16), 6) + " " + (100 * k / 16) + "%");
}
find("attnx-cbar").style.backgroundImage = "linear-gradient(to right, " + stops.join(", ") + ")";
var MRGB = null;
if (CAUSAL) {
  root.style.setProperty("--attnx-masked", D.masked[0]);
  root.style.setProperty("--attnx-hatch", D.masked[1]);
  MRGB = [1, 3, 5].map(function (x) { return parseInt(D.masked[0].substr(x, 2), 16); });
  var key = make("span", "attnx-masked-key");
  key.appendChild(make("span", "attnx-swatch attnx-masked"));
  key.appendChild(document.createTextNode("masked (key after the query)"));
  find("attnx-legend").appendChild(key);
}

build();

out = {
  hint: find("attnx-r-hint"), body: find("attnx-r-body"), q: find("attnx-r-q"),
  i: find("attnx-r-i"), k: find("attnx-r-k"), j: find("attnx-r-j"), w: find("attnx-r-w"),
  where: find("attnx-r-where"), what: find("attnx-r-what")
};
function where() { return "(" + D.layerNames[st.layer] + ", " + D.headNames[st.head] + ")"; }
function show(r, c) {
  if (st.shown) {
    qbtns[st.shown[0]].classList.remove("attnx-hl");
    colheads[st.shown[1]].classList.remove("attnx-hl");
  }
  st.shown = [r, c];
  qbtns[r].classList.add("attnx-hl");
  colheads[c].classList.add("attnx-hl");
  out.q.textContent = QT[r];
  out.i.textContent = String(r);
  out.k.textContent = KT[c];
  out.j.textContent = String(c);
  out.what.textContent = masked(r, c) ? MASKED : st.view === "c" && C ? "contribution" : "weight";
  out.w.hidden = masked(r, c);
  out.w.textContent = masked(r, c) ? "" : fmt(value(st.layer, st.head, r, c));
  out.where.textContent = where();
  out.hint.hidden = true;
  out.body.hidden = false;
}
function drawBars() {
  var r = st.query;
  for (var m = 0; m < qbtns.length; m++) {
    qbtns[m].setAttribute("aria-pressed", m === r ? "true" : "false");
  }
  querySel.value = String(r);
  if (r < 0) { barsTitle.textContent = PICK; barsList.hidden = true; return; }
  barsTitle.textContent = "Query \u201c" + QT[r] + "\u201d (row " + r + ") " +
    (st.view === "c" && C ? "takes its contributions from" : "attends to") + ", in " +
    D.layerNames[st.layer] + ", " + D.headNames[st.head] + ":";
  for (var c = 0; c < S; c++) {
    var v = value(st.layer, st.head, r, c), off = masked(r, c);
    bars[c][0].style.width = off ? "0%" : barWidth(v);
    bars[c][1].textContent = off ? "masked" : fmt(v);
    bars[c][2].classList.toggle("attnx-masked", off);
  }
  barsList.hidden = false;
}
function topKey(r) {
  var best = 0, top = -Infinity;
  for (var c = 0; c < S; c++) {
    var v = value(st.layer, st.head, r, c);
    if (!masked(r, c) && v > top) { top = v; best = c; }
  }
  return best;
}
function selectQuery(r, c) {
  st.query = r;
  drawBars();
  if (r >= 0) { show(r, c === undefined ? topKey(r) : c); }
}
function drawTiles() {
  for (var hd = 0; hd < NH; hd++) {
    var ctx = canvases[hd].getContext("2d");
    if (!ctx) { continue; }
    var img = ctx.createImageData(S, L), px = img.data, p = 0, lh = span(st.layer, hd);
    for (var r = 0; r < L; r++) {
      for (var c = 0; c < S; c++) {
        var rgb = masked(r, c) ? MRGB : RGB[lutIndex(value(st.layer, hd, r, c), lh[0], lh[1])];
        px[p] = rgb[0]; px[p + 1] = rgb[1]; px[p + 2] = rgb[2]; px[p + 3] = 255;
        p += 4;
      }
    }
    ctx.putImageData(img, 0, 0);
  }
}
function paint() {
  var m = 0, lh = span(st.layer, st.head);
  find("attnx-cbar-lo").textContent = tick(lh[0]);
  find("attnx-cbar-hi").textContent = tick(lh[1]);
  for (var r = 0; r < L; r++) {
    for (var c = 0; c < S; c++, m++) {
      if (masked(r, c)) {
        cells[m].setAttribute("data-w", "masked");
        cells[m].setAttribute("aria-label", "query " + QT[r] + ", key " + KT[c] + ": " + MASKED);
        continue;
      }
      var v = value(st.layer, st.head, r, c), s = fmt(v);
      cells[m].style.backgroundColor = "#" + LUT.substr(6 * lutIndex(v, lh[0], lh[1]), 6);
      cells[m].setAttribute("data-w", s);
      cells[m].setAttribute("aria-label", "query " + QT[r] + ", key " + KT[c] + ": " + s);
    }
  }
  for (var hd = 0; hd < NH; hd++) {
    tiles[hd].setAttribute("aria-pressed", hd === st.head ? "true" : "false");
  }
  var cap = D.layerNames[st.layer] + ", " + D.headNames[st.head], contrib = st.view === "c" && C;
  find("attnx-caption").textContent = cap + (contrib ? ": contributions" : "");
  var names = ["attnx-cbar-name", "attnx-r-what", "attnx-hint-what"];
  for (var n = 0; n < names.length; n++) {
    find(names[n]).textContent = contrib ? "contribution" : "weight";
  }
  find("attnx-view-note").hidden = !contrib;
  viewSel.value = st.view;
  setSel.value = String(st.set);
  grid.setAttribute("aria-label", (contrib ? "Contributions" : "Attention weights") + " of " + cap +
    ": rows are queries (attending from), columns are keys (attended to)");
  layerSel.value = String(st.layer);
  headSel.value = String(st.head);
  if (st.shown) { show(st.shown[0], st.shown[1]); }
  drawBars();
}
function setHead(hd) { st.head = hd; paint(); }
function setLayer(l) { st.layer = l; drawTiles(); paint(); }
function activate(r, c) {
  cells[st.row * S + st.col].tabIndex = -1;
  st.row = r;
  st.col = c;
  cells[r * S + c].tabIndex = 0;
}
function cellOf(target) {
  var c = target && target.closest ? target.closest(".attnx-cell") : null;
  return c && grid.contains(c) ? c : null;
}
function rc(c) { return [Number(c.getAttribute("data-q")), Number(c.getAttribute("data-k"))]; }

layerSel.addEventListener("change", function () { setLayer(Number(layerSel.value)); });
headSel.addEventListener("change", function () { setHead(Number(headSel.value)); });
scaleSel.addEventListener("change", function () { drawTiles(); paint(); });
viewSel.addEventListener("change", function () { st.view = viewSel.value; drawTiles(); paint(); });
setSel.addEventListener("change", function () {
  st.set = Number(setSel.value);
  build();
  drawTiles();
  paint();
});
querySel.addEventListener("change", function () { selectQuery(Number(querySel.value)); });
toggle.addEventListener("click", function () {
  var open = ov.hidden;
  ov.hidden = !open;
  toggle.setAttribute("aria-expanded", open ? "true" : "false");
  toggle.textContent = (open ? "Hide" : "Show") + " the heads of this layer";
  if (open) { balanceTiles(); }
});
ov.addEventListener("click", function (e) {
  var t = e.target.closest ? e.target.closest(".attnx-tile") : null;
  if (t && ov.contains(t)) { setHead(Number(t.getAttribute("data-h"))); }
});
grid.addEventListener("mouseover", function (e) {
  var c = cellOf(e.target);
  if (c) { var p = rc(c); show(p[0], p[1]); }
});
grid.addEventListener("focusin", function (e) {
  var c = cellOf(e.target);
  if (c) { var p = rc(c); activate(p[0], p[1]); show(p[0], p[1]); }
});
grid.addEventListener("click", function (e) {
  var b = e.target.closest ? e.target.closest(".attnx-qbtn") : null;
  if (b && grid.contains(b)) { selectQuery(Number(b.getAttribute("data-q"))); return; }
  var c = cellOf(e.target);
  if (c) { var p = rc(c); c.focus(); selectQuery(p[0], p[1]); }
});
grid.addEventListener("keydown", function (e) {
  var c = cellOf(e.target);
  if (e.key === "Escape") { selectQuery(-1); return; }
  if (!c) { return; }
  var p = rc(c), r = p[0], col = p[1];
  switch (e.key) {
    case "ArrowRight": col = Math.min(S - 1, col + 1); break;
    case "ArrowLeft": col = Math.max(0, col - 1); break;
    case "ArrowDown": r = Math.min(L - 1, r + 1); break;
    case "ArrowUp": r = Math.max(0, r - 1); break;
    case "Home": col = 0; if (e.ctrlKey) { r = 0; } break;
    case "End": col = S - 1; if (e.ctrlKey) { r = L - 1; } break;
    case "PageUp": r = 0; break;
    case "PageDown": r = L - 1; break;
    case "Enter": case " ": e.preventDefault(); selectQuery(r, col); return;
    default: return;
  }
  e.preventDefault();
  activate(r, col);
  cells[r * S + col].focus();
});

drawTiles();
paint();
})();
