/* The rotary playground. Pair j of a vector is its features P[j][0] and P[j][1]; at
   position p it turns by the angle p * TH[j] (TH from attnbook.positions.rope_frequencies):
   (a, b) -> (a cos - b sin, a sin + b cos), as attnbook.positions.rope does. The score is
   the dot product of the rotated query and key over all D features; pair j's share is the
   part of that sum on its two features. Turning q by m theta and k by n theta leaves
   between them the angle they had plus (m - n) theta: the score depends on m - n only. */
var Q = D.q, K = D.k, TH = D.theta, P = D.pairs, H = TH.length, MAXP = D.maxPos;
var TAU = 2 * Math.PI, DEG = 180 / Math.PI;
var st = { m: D.m, n: D.n, i: D.i, prev: null };
/* The drawing is a square of VB units around the origin C; the axes' caption sits in a
   margin BM units tall below it, where no line of the drawing reaches. */
var svg = find("pg-svg"), VB = 300, BM = 18, C = VB / 2, RAD = C - 46;
var mIn = find("pg-m"), nIn = find("pg-n"), iIn = find("pg-i"), say = find("pg-say");
var prevText = find("pg-prev"), shifts = root.querySelectorAll(".pg-shift");

function rotate(x, p) {
  var out = x.slice(), j;
  for (j = 0; j < H; j++) {
    var a = P[j][0], b = P[j][1], t = p * TH[j], c = Math.cos(t), s = Math.sin(t);
    out[a] = x[a] * c - x[b] * s;
    out[b] = x[a] * s + x[b] * c;
  }
  return out;
}
function compute(m, n) {
  var qr = rotate(Q, m), kr = rotate(K, n), shares = [], score = 0, j;
  for (j = 0; j < H; j++) {
    var a = P[j][0], b = P[j][1];
    shares.push(qr[a] * kr[a] + qr[b] * kr[b]);
  }
  for (j = 0; j < Q.length; j++) { score += qr[j] * kr[j]; }
  return { qr: qr, kr: kr, shares: shares, score: score };
}
function sig(v) { return String(Number(v.toPrecision(4))); }
function deg(t) { return fixed(t * DEG, 1) + "\u00b0"; }
function turn(t) { return ((t % TAU) + TAU) % TAU; }
function signed(v) { return (v < 0 ? "\u2212" : "+") + String(Math.abs(v)); }

svg.setAttribute("viewBox", "0 0 " + VB + " " + (VB + BM));
var pic = el("g", { "aria-hidden": "true" }, svg);
var AXES = [[6, C, VB - 6, C], [C, 6, C, VB - 6]];
AXES.forEach(function (a) {
  el("line", { x1: a[0], y1: a[1], x2: a[2], y2: a[3], "class": "pg-axis" }, pic);
});
var axes = el("text", { x: 8, y: VB + BM - 5, "class": "pg-tick" }, pic);
function arrow(colour, cls) {
  var g = el("g", { "class": cls }, pic);
  return { line: el("line", { "class": "pg-shaft", stroke: colour, x1: C, y1: C }, g),
           head: el("polygon", { fill: colour }, g) };
}
function drawArrow(a, tx, ty) { pointArrow(a, C, C, tx, ty); }
var parts = [D.qColour, D.kColour].map(function (colour, w) {
  return { orbit: el("circle", { cx: C, cy: C, "class": "pg-orbit", stroke: colour }, pic),
           arc: el("path", { "class": "pg-arc", stroke: colour }, pic),
           before: arrow(colour, "pg-v0"), after: arrow(colour, "pg-vr"),
           label: el("text", { "class": "pg-lab" }, pic), r: w ? 20 : 30 };
});

var body = find("pg-tbody"), rows = [];
for (var j = 0; j < H; j++) {
  var tr = make("tr"), th = make("th", null, String(j)), share = make("td", "pg-num");
  th.setAttribute("scope", "row");
  tr.appendChild(th);
  tr.appendChild(make("td", null, P[j][0] + ", " + P[j][1]));
  tr.appendChild(make("td", "pg-num", sig(TH[j])));
  tr.appendChild(share);
  body.appendChild(tr);
  rows.push({ tr: tr, share: share });
}
var plain = 0;
for (j = 0; j < Q.length; j++) { plain += Q[j] * K[j]; }
find("pg-plain").textContent = fixed(plain, 4);
find("pg-plain").setAttribute("data-v", String(plain));

/* One vector's pair i: its faint start, its turn (an arc from the start's direction), the
   rotated arrow and its label. x0 is the vector before rotation, x after, u the scale. */
function drawPair(part, x0, x, a, b, angle, u, name) {
  var r0 = Math.sqrt(x0[a] * x0[a] + x0[b] * x0[b]), from = Math.atan2(x0[b], x0[a]);
  var t = turn(angle), r = part.r, to = from + t, tx = C + u * x[a], ty = C - u * x[b];
  part.orbit.setAttribute("r", u * r0);
  drawArrow(part.before, C + u * x0[a], C - u * x0[b]);
  drawArrow(part.after, tx, ty);
  part.arc.setAttribute("d", t < 1e-3 || TAU - t < 1e-3 || r0 === 0 ? "" :
    "M" + (C + r * Math.cos(from)) + " " + (C - r * Math.sin(from)) + " A" + r + " " + r +
    " 0 " + (t > Math.PI ? 1 : 0) + " 0 " + (C + r * Math.cos(to)) + " " +
    (C - r * Math.sin(to)));
  var len = u * r0;
  part.label.textContent = name;
  part.tip = [tx, ty];
  part.dir = len > 0 ? [(tx - C) / len, (ty - C) / len] : [0.7, -0.7];
}

/* The labels stay inside the drawing, above the axes' caption: a label that would leave
   that space moves back in. EDGE: the room kept at the drawing's sides; GAP: a label's
   white outline, which hides what it lies on. */
var EDGE = 3, GAP = 2;
function floor() { var c = bbox(axes); return c[3] > 0 ? c[1] - GAP : VB - EDGE; }
function keepInside(t) {
  moveInto(t, bbox(t), [EDGE, EDGE, VB - 2 * EDGE, floor() - EDGE]);
}

/* Where a label may go, best first, as [dx, dy, reach] from its arrow's tip, y down, with
   (ux, uy) the arrow's direction: straight on past the tip, where it reads as the arrow's
   name; that turned 45 degrees either way; beside the tip on either side; the eight
   compass points; then all of these twice as far, for where the drawing is crowded. */
function spots(ux, uy) {
  var s = Math.SQRT1_2, near = [[ux, uy], [s * (ux - uy), s * (uy + ux)],
    [s * (ux + uy), s * (uy - ux)], [-uy, ux], [uy, -ux], [1, 0], [-1, 0], [0, -1], [0, 1],
    [s, -s], [-s, -s], [s, s], [-s, s]];
  return near.map(function (d) { return [d[0], d[1], 12]; })
    .concat(near.map(function (d) { return [d[0], d[1], 24]; }));
}
function put(part, d) {
  var t = part.label;
  t.setAttribute("x", part.tip[0] + d[2] * d[0]);
  t.setAttribute("y", part.tip[1] + d[2] * d[1] + 4);
  t.setAttribute("text-anchor", d[0] < -0.3 ? "end" : (d[0] > 0.3 ? "start" : "middle"));
  keepInside(t);
}
/* How much of arrow a (as pointArrow drew it) lies under box b with its outline: the
   shaft as a band SHAFT units either side of its line (half its stroke in rope.css), and
   each edge of the head; a head is smaller than any label, so never inside one whole. */
var SHAFT = 1.5, AXIS = 0.6;
function underArrow(b, a) {
  function at(name) { return Number(a.line.getAttribute(name)); }
  var c = crossing(b, GAP + SHAFT, at("x1"), at("y1"), at("x2"), at("y2"));
  var p = a.head.points, n = p.numberOfItems, j;
  for (j = 0; j < n; j++) {
    var e = p.getItem(j), f = p.getItem((j + 1) % n);
    c += crossing(b, GAP, e.x, e.y, f.x, f.y);
  }
  return c;
}
/* The labels, q's first: each at its first spot clear of the label placed before it, of
   both turned arrows (shafts and heads, its own too) and of the two axes, or, where none is
   clear, at the spot that covers them least: the other label counts a hundred times what
   a stretch of arrow does, an axis (drawn thinner and grey) half what an arrow does. */
function placeLabels() {
  var placed = [];
  parts.forEach(function (part) {
    placeBest(spots(part.dir[0], part.dir[1]), function (d) { put(part, d); }, function () {
      var box = bbox(part.label), cover = 0;
      placed.forEach(function (o) { cover += 100 * overlap(box, o, GAP); });
      parts.forEach(function (p) { cover += 6 * underArrow(box, p.after); });
      AXES.forEach(function (a) {
        cover += 3 * crossing(box, GAP + AXIS, a[0], a[1], a[2], a[3]);
      });
      return cover;
    });
    placed.push(bbox(part.label));
  });
}

function render() {
  var m = st.m, n = st.n, i = st.i, r = compute(m, n), a = P[i][0], b = P[i][1], k;
  var rq = Math.sqrt(Q[a] * Q[a] + Q[b] * Q[b]), rk = Math.sqrt(K[a] * K[a] + K[b] * K[b]);
  var u = RAD / (Math.max(rq, rk) || 1), aq = m * TH[i], ak = n * TH[i];
  var between = Math.atan2(r.kr[a] * r.qr[b] - r.kr[b] * r.qr[a],
                           r.kr[a] * r.qr[a] + r.kr[b] * r.qr[b]);
  drawPair(parts[0], Q, r.qr, a, b, aq, u, "q at " + m);
  drawPair(parts[1], K, r.kr, a, b, ak, u, "k at " + n);
  axes.textContent = "across: feature " + a + ", up: feature " + b;
  placeLabels();
  svg.setAttribute("aria-label", "Pair " + i + " (features " + a + " and " + b +
                   "): the query turned by " + deg(turn(aq)) + " at position " + m +
                   ", the key by " + deg(turn(ak)) + " at position " + n + ".");
  find("pg-score").textContent = fixed(r.score, 4);
  find("pg-offset").textContent = String(m - n);
  find("pg-share").textContent = fixed(r.shares[i], 4);
  find("pg-pi").textContent = String(i);
  find("pg-aq").textContent = m + " \u00d7 " + sig(TH[i]) + " = " + fixed(aq, 4) + " rad (" +
    deg(turn(aq)) + ")";
  find("pg-ak").textContent = n + " \u00d7 " + sig(TH[i]) + " = " + fixed(ak, 4) + " rad (" +
    deg(turn(ak)) + ")";
  find("pg-between").textContent = deg(between);
  find("pg-sum").textContent = fixed(r.score, 4);
  for (k = 0; k < H; k++) {
    rows[k].share.textContent = fixed(r.shares[k], 4);
    rows[k].share.setAttribute("data-v", String(r.shares[k]));
    rows[k].tr.classList.toggle("pg-top", k === i);
  }
  mIn.value = String(m);
  nIn.value = String(n);
  iIn.value = String(i);
  find("pg-m-out").textContent = "m = " + m;
  find("pg-n-out").textContent = "n = " + n;
  find("pg-i-out").textContent = "i = " + i + " (features " + a + ", " + b + ")";
  mIn.setAttribute("aria-valuetext", "m = " + m);
  nIn.setAttribute("aria-valuetext", "n = " + n);
  iIn.setAttribute("aria-valuetext", "pair " + i + ", features " + a + " and " + b);
  for (k = 0; k < shifts.length; k++) {
    var s = Number(shifts[k].getAttribute("data-shift"));
    shifts[k].setAttribute("aria-disabled", Math.min(m, n) + s < 0 || Math.max(m, n) + s > MAXP ?
                           "true" : "false");
  }
  var data = { m: m, n: n, i: i, offset: m - n, score: r.score, share: r.shares[i],
               angleQ: aq, angleK: ak, between: between, qRot: r.qr.join(" "),
               kRot: r.kr.join(" ") };
  for (var key in data) {
    root.setAttribute("data-" + key.replace(/[A-Z]/g, function (c) {
      return "-" + c.toLowerCase();
    }), String(data[key]));
  }
  if (st.prev) {
    prevText.hidden = false;
    prevText.textContent = "Before the last move: m = " + st.prev.m + ", n = " + st.prev.n +
      ", offset " + (st.prev.m - st.prev.n) + ", score " + fixed(st.prev.score, 4) + ".";
    root.setAttribute("data-prev-score", String(st.prev.score));
  } else {
    prevText.hidden = true;
    root.removeAttribute("data-prev-score");
  }
  return r;
}
function tell(text) { if (say.textContent !== text) { say.textContent = text; } }
/* Move to positions (m, n), keeping the state before the move to compare with. */
function move(m, n, shift) {
  var before = { m: st.m, n: st.n, score: compute(st.m, st.n).score };
  if (m === st.m && n === st.n) { return; }
  st.prev = before;
  st.m = m;
  st.n = n;
  var r = render(), i = st.i, diff = r.score - before.score;
  if (shift) {
    tell("Both moved by " + signed(shift) + ": pair " + i + " of q and of k each turned a " +
         "further " + deg(shift * TH[i]) + ", the offset is still " + (m - n) + ", and the " +
         "score is " + (Math.abs(diff) < 1e-9 * (1 + Math.abs(r.score)) ? "unchanged" :
         "changed") + ": " + fixed(before.score, 4) + " before, " + fixed(r.score, 4) +
         " now.");
  } else {
    tell("The offset went from " + (before.m - before.n) + " to " + (m - n) + ", and the " +
         "score from " + fixed(before.score, 4) + " to " + fixed(r.score, 4) + ".");
  }
}
mIn.addEventListener("input", function () { move(Number(mIn.value), st.n, 0); });
nIn.addEventListener("input", function () { move(st.m, Number(nIn.value), 0); });
iIn.addEventListener("input", function () {
  st.i = Number(iIn.value);
  render();
  tell("Pair " + st.i + " turns by " + sig(TH[st.i]) + " rad (" + deg(TH[st.i]) +
       ") per position. The score, a sum over every pair, does not depend on the pair drawn.");
});
Array.prototype.forEach.call(shifts, function (button) {
  button.addEventListener("click", function () {
    var s = Number(button.getAttribute("data-shift"));
    if (button.getAttribute("aria-disabled") === "true") {
      tell("Cannot shift by " + signed(s) + ": positions run from 0 to " + MAXP + ".");
      return;
    }
    move(st.m + s, st.n + s, s);
  });
});
find("pg-reset").addEventListener("click", function () {
  st.i = D.i;
  move(D.m, D.n, 0);
  st.prev = null;
  render();
  tell("Back to the opening positions. Shift both: the arrows turn, the score stays.");
});

start();
render();
tell("Shift both positions: the arrows turn, the score stays.");
ready();
