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
function ready() { root.setAttribute("data-pg-ready", "1"); }

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
