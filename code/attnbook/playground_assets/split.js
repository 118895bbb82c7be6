/* The multi-head split playground. The input x has L rows (tokens) and d_model columns
   (features); the entry of token t, feature f is drawn as "t<t>f<f>" in token t's colour.
   The correct split (view to (L, h, d_head), then transpose to (h, L, d_head)) puts feature
   hd * d_head + c of token p at head hd, position p, column c. The buggy one (straight to
   (h, L, d_head), no transpose) reads x in row-major order and cuts it: head hd, position p,
   column c holds the flat entry n = (hd * L + p) * d_head + c, that is token
   floor(n / d_model), feature n mod d_model. */
var DM = D.dm, MAXL = D.maxL, T = D.tokens;
var st = { L: D.L, h: D.h };
var hSel = find("pg-h"), lIn = find("pg-l");
function correctAt(hd, p, c, L, dh) { return [p, hd * dh + c]; }
function buggyAt(hd, p, c, L, dh) {
  var n = (hd * L + p) * dh + c;
  return [Math.floor(n / DM), n % DM];
}
function cell(t, f) {
  var td = make("td", "pg-c", "t" + t + "f" + f);
  td.style.backgroundColor = D.colours[t];
  td.style.color = D.ink[t];
  td.setAttribute("data-t", String(t));
  td.setAttribute("data-f", String(f));
  return td;
}
function th(text, cls, scope) {
  var e = make("th", cls, text);
  if (scope) { e.setAttribute("scope", scope); }
  return e;
}
function drawInput(L, h, dh) {
  var box = find("pg-input");
  box.textContent = "";
  var t = make("table", "pg-cells pg-x"), cap = make("caption");
  cap.textContent = "x: (L, d_model) = (" + L + ", " + DM + "), one row per token";
  t.appendChild(cap);
  var thead = make("thead"), r1 = make("tr"), r2 = make("tr"), hd, f, p;
  r1.appendChild(th("", null, null));
  for (hd = 0; hd < h; hd++) {
    /* The group's heading fits the columns it spans: 36 px a column at d_head = 1. */
    var g = th(dh >= 3 ? "features of head " + hd : (dh === 2 ? "head " + hd : "h" + hd),
               "pg-hgroup", "colgroup");
    g.title = "features of head " + hd;
    g.colSpan = dh;
    r1.appendChild(g);
  }
  r2.appendChild(th("token", "pg-rowlab", "col"));
  for (f = 0; f < DM; f++) { r2.appendChild(th("f" + f, null, "col")); }
  thead.appendChild(r1);
  thead.appendChild(r2);
  t.appendChild(thead);
  var tb = make("tbody");
  for (p = 0; p < L; p++) {
    var tr = make("tr"), rh = th(null, "pg-rowlab", "row");
    rh.appendChild(make("span", "pg-tok", T[p]));
    rh.title = T[p];
    tr.appendChild(rh);
    for (f = 0; f < DM; f++) { tr.appendChild(cell(p, f)); }
    tb.appendChild(tr);
  }
  t.appendChild(tb);
  box.appendChild(t);
}
function drawSplit(cls, at, L, h, dh) {
  var box = find(cls + " .pg-heads"), owners = [], hd, p, c;
  box.textContent = "";
  for (hd = 0; hd < h; hd++) {
    var t = make("table", "pg-cells pg-head"), cap = make("caption");
    cap.textContent = "head " + hd;
    t.setAttribute("data-head", String(hd));
    t.appendChild(cap);
    var thead = make("thead"), r = make("tr");
    r.appendChild(th("", null, null));
    for (c = 0; c < dh; c++) { r.appendChild(th(String(c), null, "col")); }
    thead.appendChild(r);
    t.appendChild(thead);
    var tb = make("tbody"), seen = {};
    for (p = 0; p < L; p++) {
      var tr = make("tr");
      tr.appendChild(th("pos " + p, "pg-rowlab", "row"));
      for (c = 0; c < dh; c++) {
        var tf = at(hd, p, c, L, dh);
        seen[tf[0]] = true;
        tr.appendChild(cell(tf[0], tf[1]));
      }
      tb.appendChild(tr);
    }
    t.appendChild(tb);
    box.appendChild(t);
    owners.push(Object.keys(seen).map(Number).sort(function (a, b) { return a - b; }));
  }
  return owners;
}
function list(a) { return a.length > 1 ? a.slice(0, -1).join(", ") + " and " + a[a.length - 1] : String(a[0]); }
function render() {
  var L = st.L, h = st.h, dh = DM / h, hd, t;
  drawInput(L, h, dh);
  drawSplit("pg-correct", correctAt, L, h, dh);
  var owners = drawSplit("pg-buggy", buggyAt, L, h, dh);
  /* "feature 3" or "features 4\u20137", the range held together by a word joiner (a
     phone's line had broken after its dash). */
  function features(hd) {
    return dh === 1 ? "feature " + hd
      : "features " + hd * dh + "\u2013\u2060" + (hd * dh + dh - 1);
  }
  find("pg-correct .pg-what").textContent = "Every head holds " +
    (L === 1 ? "the one token" : "all " + L + " tokens") + ", " + dh +
    (dh === 1 ? " feature" : " features") + (L === 1 ? " of it" : " of each") + ": head 0 " +
    features(0) + (h > 1 ? ", head 1 " + features(1) : "") + (h > 2 ? ", and so on." : ".");
  var parts = [], cut = [];
  for (hd = 0; hd < h; hd++) {
    parts.push("head " + hd + (owners[hd].length === 1 ? " holds token " : " holds tokens ") +
               list(owners[hd]));
  }
  for (t = 0; t < L; t++) {
    var where = [];
    for (hd = 0; hd < h; hd++) { if (owners[hd].indexOf(t) >= 0) { where.push(hd); } }
    if (where.length > 1) { cut.push("token " + t + " is cut between heads " + list(where)); }
  }
  /* With one head, or one token, the reshape reads the features in the same order as the
     correct split: there is no wrong split to describe. */
  var what = find("pg-buggy .pg-what"), agree = h === 1 || L === 1;
  what.textContent = h === 1 ? "With one head the two splits agree." :
    L === 1 ? "With one token the two splits agree: each head holds a slice of it." :
    parts.join("; ") + ". Each \u201cposition\u201d is a piece of one token, not one slice of " +
    "every token.";
  var cutText = find("pg-buggy .pg-cut");
  cutText.textContent = cut.length && !agree ? cut.join("; ") + "." : "";
  cutText.hidden = !cut.length || agree;
  root.setAttribute("data-l", String(L));
  root.setAttribute("data-h", String(h));
  var leg = find("pg-legend");
  leg.textContent = "";
  leg.appendChild(make("span", null, "Colour = token:"));
  for (t = 0; t < L; t++) {
    var item = make("span"), sw = make("span", "pg-sw");
    sw.style.backgroundColor = D.colours[t];
    item.appendChild(sw);
    item.appendChild(make("span", "pg-tok", "t" + t + " " + T[t]));
    leg.appendChild(item);
  }
  cues();
}
for (var d = 1; d <= DM; d++) {
  if (DM % d === 0) {
    var o = make("option", null, String(d) + " (d_head = " + DM / d + ")");
    o.value = String(d);
    hSel.appendChild(o);
  }
}
lIn.min = "1";
lIn.max = String(MAXL);
hSel.addEventListener("change", function () { st.h = Number(hSel.value); render(); });
/* An L out of range is said, not dropped silently: while typing, what the field takes;
   once the field is left, that the picture kept its L. */
var note = find("pg-note");
function tellL(text) {
  note.hidden = !text;
  if (note.textContent !== text) { note.textContent = text; }
}
function readL(strict) {
  var v = Number(lIn.value), range = "a whole number from 1 to " + MAXL;
  if (lIn.value !== "" && Math.floor(v) === v && v >= 1 && v <= MAXL) {
    tellL("");
    if (v !== st.L) { st.L = v; render(); }
  } else if (strict) {
    lIn.value = String(st.L);
    tellL("Tokens L must be " + range + ": the picture keeps L = " + st.L + ".");
  } else if (lIn.value !== "") {
    tellL("Tokens L takes " + range + ".");
  }
}
lIn.addEventListener("input", function () { readL(false); });
lIn.addEventListener("change", function () { readL(true); });

start();
hSel.value = String(st.h);
lIn.value = String(st.L);
render();
ready();
