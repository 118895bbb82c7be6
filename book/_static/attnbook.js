/* The book's one script on top of the theme's.

   Scroll cues: a table or display equation wider than the column scrolls sideways in its
   own box, which on a phone looks like a table that simply ends. Each such box gets a
   wrapper (div.attnbook-scroll-cue) whose classes say on which side there is more to see;
   attnbook.css draws a shadow on that side. A table scrolls in the theme's container; an
   equation in the box MathJax draws (after this script has run); an inline formula wider
   than its line scrolls in its own span, which carries the cues itself.

   The phone's chapter list: the theme opens the sidebar as a drawer (a dialog) scrolled to
   its top, where the current chapter of a later part is out of sight; it is scrolled into
   view each time the drawer opens. */
(function () {
  "use strict";
  var BOXES = ".bd-content .pst-scrollable-table-container, .bd-content div.math";

  function scroller(wrapper) {
    return wrapper.querySelector(":scope > div.math > mjx-container") ||
      wrapper.firstElementChild;
  }

  // Mark on `marked` the sides of `box` that have more to see.
  function edges(box, marked) {
    var hidden = box.scrollWidth - box.clientWidth;
    marked.classList.toggle("attnbook-more-left", hidden > 1 && box.scrollLeft > 1);
    marked.classList.toggle("attnbook-more-right",
                            hidden > 1 && box.scrollLeft < hidden - 1);
  }

  function update(wrapper) {
    edges(scroller(wrapper), wrapper);
  }

  // An inline formula wider than its line becomes a scroll box with the same cues (on the
  // formula itself: it sits inside a line of text, no wrapper fits there).
  function markWideFormulas() {
    document.querySelectorAll(".bd-content span.math").forEach(function (maths) {
      var drawn = maths.querySelector(":scope > mjx-container > mjx-math");
      if (!drawn) { return; }
      var wide = drawn.getBoundingClientRect().width > maths.clientWidth + 1;
      maths.classList.toggle("attnbook-scrolls", wide);
      if (!wide) {
        maths.classList.remove("attnbook-more-left", "attnbook-more-right");
        return;
      }
      if (!maths.hasAttribute("data-attnbook-cue")) {
        maths.setAttribute("data-attnbook-cue", "");
        maths.addEventListener("scroll", function () {
          if (maths.classList.contains("attnbook-scrolls")) { edges(maths, maths); }
        }, { passive: true });
      }
      edges(maths, maths);
    });
  }

  function addCues() {
    var wrappers = [];
    // Measured again whenever the box or what it holds changes size: the column narrows, or
    // MathJax draws a formula (in a table's cells too) and its fonts arrive.
    var watch = window.ResizeObserver ? new ResizeObserver(function (entries) {
      entries.forEach(function (entry) {
        update(entry.target.closest(".attnbook-scroll-cue"));
      });
    }) : null;
    function watchContent(wrapper) {
      var box = scroller(wrapper);
      if (watch && box.firstElementChild) { watch.observe(box.firstElementChild); }
    }
    document.querySelectorAll(BOXES).forEach(function (box) {
      var wrapper = document.createElement("div");
      wrapper.className = "attnbook-scroll-cue";
      box.parentNode.insertBefore(wrapper, box);
      wrapper.appendChild(box);
      // A scroll event does not bubble; caught on its way down, it reaches the wrapper.
      wrapper.addEventListener("scroll", function () { update(wrapper); },
                               { capture: true, passive: true });
      if (watch) { watch.observe(wrapper); }
      watchContent(wrapper);
      wrappers.push(wrapper);
      update(wrapper);
    });
    // Once MathJax has drawn the equations, watch the boxes it made.
    window.addEventListener("load", function () {
      var typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
      Promise.resolve(typeset).then(function () {
        wrappers.forEach(function (wrapper) {
          watchContent(wrapper);
          update(wrapper);
        });
        markWideFormulas();
      });
    });
    var pending = false;
    window.addEventListener("resize", function () {
      if (pending) { return; }
      pending = true;
      requestAnimationFrame(function () { pending = false; markWideFormulas(); });
    });
  }

  function showCurrentChapterInDrawer() {
    var drawer = document.getElementById("pst-primary-sidebar-modal");
    if (!drawer || !window.MutationObserver) { return; }
    new MutationObserver(function () {
      var current = drawer.open && drawer.querySelector("nav.bd-links a.current");
      if (current) { current.scrollIntoView({ block: "center" }); }
    }).observe(drawer, { attributes: true, attributeFilter: ["open"] });
  }

  function setUp() {
    addCues();
    showCurrentChapterInDrawer();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUp);
  } else {
    setUp();
  }
})();
