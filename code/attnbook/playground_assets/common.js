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
