/* Shared helpers, pasted into each playground's one function scope (never global).
   D is the playground's data; root its element. No two slashes in a row anywhere: the fragment must hold
   nothing that reads as a URL. */
var root = document.getElementById(D.id);
if (!root || root.getAttribute("data-pg-ready") === "1") { return; }
function find(cls) { return root.querySelector("." + cls); }
function make(tag, cls, text) {
  var e = document.createElement(tag);
  if (cls) { e.className = cls; }
  if (text !== undefined && text !== null) { e.textContent = text; }
  return e;
}
function fixed(v, n) {
  var s = v.toFixed(n);
  return Number(s) === 0 ? (0).toFixed(n) : s;
}
function start() {
  find("pg-nojs").hidden = true;
  find("pg-live").hidden = false;
  if (D.title) {
    find("pg-title").textContent = D.title;
    find("pg-title").hidden = false;
    root.setAttribute("aria-label", root.getAttribute("aria-label") + ": " + D.title);
  }
}
/* A wide part (.pg-scroller in a .pg-scroll) scrolls sideways in its own box, never the page.
   When it overflows, its note (a .pg-cue just before the .pg-scroll) shows, a shadow marks
   each side with more to see, and the box joins the tab order so keys can scroll it. */
var cueUpdates = [];
function cue(box) {
  var wrap = box.parentNode, note = wrap.previousElementSibling;
  if (!note || !note.classList.contains("pg-cue")) { note = null; }
  function update() {
    var over = box.scrollWidth > box.clientWidth + 1, x = Math.abs(box.scrollLeft);
    wrap.classList.toggle("pg-more-r", over && x + box.clientWidth < box.scrollWidth - 1);
    wrap.classList.toggle("pg-more-l", over && x > 1);
    if (note) { note.hidden = !over; }
    if (over) { box.tabIndex = 0; } else { box.removeAttribute("tabindex"); }
  }
  box.addEventListener("scroll", update);
  cueUpdates.push(update);
  update();
}
function cues() { for (var n = 0; n < cueUpdates.length; n++) { cueUpdates[n](); } }
function ready() {
  var boxes = root.querySelectorAll(".pg-scroller"), n, pending = false;
  for (n = 0; n < boxes.length; n++) { cue(boxes[n]); }
  if (typeof ResizeObserver === "function") {
    var watch = new ResizeObserver(function () {
      if (pending) { return; }
      pending = true;
      requestAnimationFrame(function () { pending = false; cues(); });
    });
    watch.observe(root);
    for (n = 0; n < boxes.length; n++) {
      watch.observe(boxes[n]);
      if (boxes[n].firstElementChild) { watch.observe(boxes[n].firstElementChild); }
    }
  } else {
    window.addEventListener("resize", cues);
  }
  root.setAttribute("data-pg-ready", "1");
}

/* SVG drawing, for the playgrounds that draw vectors. el: a new element in the namespace of
   its parent (the playground's svg or a group in it), with attributes, appended to parent.
   pointArrow: arrow a = { line, head } from (ox, oy) to (tx, ty) in viewBox units; the shaft
   stops where the head, at most 11 units long, begins. */
function el(tag, attrs, parent) {
  var e = document.createElementNS(parent.namespaceURI, tag);
  for (var name in attrs) { e.setAttribute(name, String(attrs[name])); }
  parent.appendChild(e);
  return e;
}
function pointArrow(a, ox, oy, tx, ty) {
  var dx = tx - ox, dy = ty - oy, len = Math.sqrt(dx * dx + dy * dy);
  var hl = Math.min(11, len), ux = len > 0 ? dx / len : 0, uy = len > 0 ? dy / len : 0;
  var bx = tx - hl * ux, by = ty - hl * uy, hw = hl * 0.5;
  a.line.setAttribute("x2", bx);
  a.line.setAttribute("y2", by);
  a.head.setAttribute("points", [tx, ty, bx - hw * uy, by + hw * ux, bx + hw * uy,
                                 by - hw * ux].join(" "));
}
/* Boxes in a drawing are [x, y, width, height] in its units. bbox(t): an SVG element's box.
   overlap(a, b, g): the area of box a, grown by g on every side, that lies on box b. */
function bbox(t) { var b = t.getBBox(); return [b.x, b.y, b.width, b.height]; }
function overlap(a, b, g) {
  var w = Math.min(a[0] + a[2] + g, b[0] + b[2]) - Math.max(a[0] - g, b[0]);
  var h = Math.min(a[1] + a[3] + g, b[1] + b[3]) - Math.max(a[1] - g, b[1]);
  return w > 0 && h > 0 ? w * h : 0;
}
/* crossing(b, g, x1, y1, x2, y2): how long a stretch of the segment from (x1, y1) to
   (x2, y2) runs through box b, grown by g on every side (the segment clipped to the box,
   as Liang and Barsky clip). */
function crossing(b, g, x1, y1, x2, y2) {
  var dx = x2 - x1, dy = y2 - y1, t0 = 0, t1 = 1, e;
  var sides = [[-dx, x1 - b[0] + g], [dx, b[0] + b[2] + g - x1],
               [-dy, y1 - b[1] + g], [dy, b[1] + b[3] + g - y1]];
  for (e = 0; e < 4; e++) {
    var p = sides[e][0], q = sides[e][1];
    if (p === 0) {
      if (q < 0) { return 0; }
    } else if (p < 0) {
      t0 = Math.max(t0, q / p);
    } else {
      t1 = Math.min(t1, q / p);
    }
  }
  return t1 > t0 ? (t1 - t0) * Math.sqrt(dx * dx + dy * dy) : 0;
}
/* Labels placed by search. placeBest(options, put, cost): puts the label at each option in
   turn, best first (put(option)), and leaves it at the first one that covers nothing
   (cost() is 0), or else at the one that covers least. moveInto(t, b, f): moves text t,
   whose box is b, by the least that brings b inside box f. */
function placeBest(options, put, cost) {
  var best = 0, least = Infinity;
  for (var c = 0; c < options.length && least > 0; c++) {
    put(options[c]);
    var v = cost();
    if (v < least) { least = v; best = c; }
  }
  put(options[best]);
}
function moveInto(t, b, f) {
  var dx = Math.max(0, f[0] - b[0]) - Math.max(0, b[0] + b[2] - f[0] - f[2]);
  var dy = Math.max(0, f[1] - b[1]) - Math.max(0, b[1] + b[3] - f[1] - f[3]);
  t.setAttribute("x", Number(t.getAttribute("x")) + dx);
  t.setAttribute("y", Number(t.getAttribute("y")) + dy);
}
