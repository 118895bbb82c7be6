/* The mask playground: an L x L grid of buttons, one per (query i, key j). A pressed button
   is an allowed key (True in the package's masks). Each row's weights are the softmax of the
   scores over its allowed keys; a row with no allowed key is all zeros, as
   attnbook.attention.masked_softmax gives. With the fill switch on, every row is computed the
   way a -1e9 fill computes it: softmax(scores with forbidden entries set to -1e9). */
var L = D.L, SC = D.scores, T = D.tokens, FILL = -1e9;
var allow = [], i, j;
for (i = 0; i < L * L; i++) { allow.push(true); }
var st = { preset: D.preset, fill: false, row: 0, col: 0 };
var lut = [], tcol = [];
function lin(c) { c /= 255; return c <= 0.04045 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); }
for (i = 0; i < 256; i++) {
  var hex = D.lut.substr(6 * i, 6);
  var r = parseInt(hex.substr(0, 2), 16), g = parseInt(hex.substr(2, 2), 16);
  var b = parseInt(hex.substr(4, 2), 16);
  var Y = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
  lut.push("#" + hex);
  tcol.push((Y + 0.05) / 0.05 >= 1.05 / (Y + 0.05) ? "#000" : "#fff");
}
function presetAllows(name, q, k) {
  switch (name) {
    case "none": return true;
    case "causal": return k <= q;
    case "upper": return k >= q;
    case "padding": return k < L - D.pad;
    case "left-padding": return k <= q && k >= D.pad;
  }
  return true;
}
function weightsOf(q) {
  var w = [], m = -Infinity, sum = 0, any = false, k, s = [];
  for (k = 0; k < L; k++) {
    var ok = allow[q * L + k];
    any = any || ok;
    s.push(ok ? SC[q * L + k] : (st.fill ? FILL : -Infinity));
  }
  if (!any && !st.fill) {
    for (k = 0; k < L; k++) { w.push(0); }
    return w;
  }
  for (k = 0; k < L; k++) { m = Math.max(m, s[k]); }
  for (k = 0; k < L; k++) { w.push(Math.exp(s[k] - m)); sum += w[k]; }
  for (k = 0; k < L; k++) { w[k] /= sum; }
  return w;
}
function show(w) {
  if (w === 0) { return "0"; }
  if (w === 1) { return "1"; }
  var s = w.toFixed(2);
  return s === "0.00" ? "<.01" : (s === "1.00" ? ">.99" : s);
}

var table = find("pg-grid"), head = make("tr"), corner = make("th", "pg-corner");
/* Two halves that never break inside: on a phone the corner takes two lines, not four. */
corner.appendChild(make("span", "pg-half", "query \u2193"));
corner.appendChild(document.createTextNode(" "));
corner.appendChild(make("span", "pg-half", "key \u2192"));
corner.setAttribute("scope", "col");
head.appendChild(corner);
for (j = 0; j < L; j++) {
  var ch = make("th", "pg-colhead");
  ch.setAttribute("scope", "col");
  ch.title = T[j];
  ch.appendChild(make("span", "pg-tok", T[j]));
  head.appendChild(ch);
}
var sumHead = make("th", "pg-corner pg-sumhead", "row total");
sumHead.setAttribute("scope", "col");
head.appendChild(sumHead);
var thead = make("thead"), tbody = make("tbody");
thead.appendChild(head);
table.appendChild(thead);
table.appendChild(tbody);
var cells = [], sums = [];
for (i = 0; i < L; i++) {
  var tr = make("tr"), rh = make("th", "pg-rowhead");
  rh.setAttribute("scope", "row");
  rh.title = T[i];
  rh.appendChild(make("span", "pg-tok", T[i]));
  tr.appendChild(rh);
  for (j = 0; j < L; j++) {
    var td = make("td"), btn = make("button", "pg-cell");
    btn.type = "button";
    btn.tabIndex = i === 0 && j === 0 ? 0 : -1;
    btn.setAttribute("data-i", String(i));
    btn.setAttribute("data-j", String(j));
    td.appendChild(btn);
    tr.appendChild(td);
    cells.push(btn);
  }
  var sum = make("td", "pg-sum");
  tr.appendChild(sum);
  sums.push(sum);
  tbody.appendChild(tr);
}
var say = find("pg-say"), presets = root.querySelectorAll(".pg-preset");
var fillBox = find("pg-fill");

function render() {
  var empty = [], q, k;
  for (q = 0; q < L; q++) {
    var w = weightsOf(q), n = 0, total = 0;
    for (k = 0; k < L; k++) {
      var c = cells[q * L + k], ok = allow[q * L + k], v = w[k], text = show(v);
      n += ok ? 1 : 0;
      total += v;
      c.textContent = text;
      c.setAttribute("aria-pressed", ok ? "true" : "false");
      c.setAttribute("data-w", String(v));
      c.setAttribute("data-allowed", ok ? "1" : "0");
      c.classList.toggle("pg-off", !ok && v === 0);
      c.classList.toggle("pg-leak", !ok && v !== 0);
      if (ok) {
        var idx = Math.floor(Math.min(1, Math.max(0, v)) * 255 + 0.5);
        c.style.backgroundColor = lut[idx];
        c.style.color = tcol[idx];
      } else {
        c.style.backgroundColor = "";
        c.style.color = "";
      }
      c.setAttribute("aria-label", "query " + T[q] + ", key " + T[k] + ": " +
                     (ok ? "allowed" : "forbidden") + ", score " + fixed(SC[q * L + k], 2) +
                     ", weight " + text);
      c.title = "score " + fixed(SC[q * L + k], 2) + ", weight " + fixed(v, 4);
    }
    var s = sums[q];
    s.classList.toggle("pg-empty", n === 0);
    if (n === 0) {
      empty.push(T[q]);
      s.textContent = st.fill ? "no key: \u22121e9 spreads " + fixed(1 / L, 2) + " each" :
        "no key: zeros";
    } else {
      s.textContent = "sum " + fixed(total, 2) + " over " + n + (n === 1 ? " key" : " keys");
    }
    s.setAttribute("data-sum", String(total));
  }
  for (k = 0; k < presets.length; k++) {
    presets[k].setAttribute("aria-pressed",
                            presets[k].getAttribute("data-preset") === st.preset ? "true" :
                            "false");
  }
  root.setAttribute("data-preset", st.preset);
  var text;
  if (!empty.length) {
    text = "Every row has at least one allowed key, and its weights sum to 1.";
  } else if (st.fill) {
    text = "With a \u22121e9 fill, " + (empty.length === 1
      ? "1 row with no allowed key spreads its weight evenly over keys it was"
      : empty.length + " rows with no allowed key spread their weight evenly over keys " +
        "they were") + " told to ignore.";
  } else {
    text = empty.length + (empty.length === 1 ? " row has" : " rows have") +
      " no allowed key: zero weights (and a zero output), not NaN.";
  }
  if (say.textContent !== text) { say.textContent = text; }
}
function applyPreset(name) {
  st.preset = name;
  for (var q = 0; q < L; q++) {
    for (var k = 0; k < L; k++) { allow[q * L + k] = presetAllows(name, q, k); }
  }
  render();
}
function focusCell(q, k) {
  cells[st.row * L + st.col].tabIndex = -1;
  st.row = q;
  st.col = k;
  cells[q * L + k].tabIndex = 0;
  cells[q * L + k].focus();
}
table.addEventListener("click", function (ev) {
  var c = ev.target.closest ? ev.target.closest(".pg-cell") : null;
  if (!c || !table.contains(c)) { return; }
  var q = Number(c.getAttribute("data-i")), k = Number(c.getAttribute("data-j"));
  allow[q * L + k] = !allow[q * L + k];
  st.preset = "custom";
  focusCell(q, k);
  render();
});
table.addEventListener("keydown", function (ev) {
  var c = ev.target.closest ? ev.target.closest(".pg-cell") : null;
  if (!c) { return; }
  var q = Number(c.getAttribute("data-i")), k = Number(c.getAttribute("data-j"));
  switch (ev.key) {
    case "ArrowRight": k = Math.min(L - 1, k + 1); break;
    case "ArrowLeft": k = Math.max(0, k - 1); break;
    case "ArrowDown": q = Math.min(L - 1, q + 1); break;
    case "ArrowUp": q = Math.max(0, q - 1); break;
    case "Home": k = 0; break;
    case "End": k = L - 1; break;
    default: return;
  }
  ev.preventDefault();
  focusCell(q, k);
});
for (i = 0; i < presets.length; i++) {
  presets[i].addEventListener("click", function (ev) {
    applyPreset(ev.currentTarget.getAttribute("data-preset"));
  });
}
fillBox.addEventListener("change", function () { st.fill = fillBox.checked; render(); });

start();
fillBox.checked = false;
applyPreset(D.preset);
ready();
