/* The book's one script on top of the theme's.

   Scroll cues: a table, code block, output or formula wider than the column scrolls
   sideways in its own box, which on a phone looks like a box that simply ends. Classes say
   on which side there is more to see, and attnbook.css draws a shadow on that side. A table
   or a code block (its pre) gets a wrapper (div.attnbook-scroll-cue) that carries them; a
   formula carries them itself
   (a display formula's box is the one MathJax draws, left of its equation number; an inline
   formula wider than its line becomes a scroll box of its own).

   The phone's chapter list: the theme opens the sidebar as a drawer (a dialog) scrolled to
   its top, where the current chapter of a later part is out of sight; it is scrolled into
   view each time the drawer opens.

   Figures shown small: a figure shrunk to well under its own size says so in its caption,
   and that a tap opens it full size. */
(function () {
  "use strict";
  var BOXES = ".bd-content .pst-scrollable-table-container";
  // Code and printed outputs: every pre of the content sits in a div.highlight.
  var CODE = ".bd-content div.highlight > pre";

  // Mark on `marked` the sides of `box` that have more to see.
  // A shadow is never wider than what it hides (at most 16 px): a box 6 px too narrow
  // gets a 6 px shadow, not one over 10 px of what is in view.
  function edges(box, marked) {
    var hidden = box.scrollWidth - box.clientWidth;
    marked.classList.toggle("attnbook-more-left", hidden > 1 && box.scrollLeft > 1);
    marked.classList.toggle("attnbook-more-right",
                            hidden > 1 && box.scrollLeft < hidden - 1);
    marked.style.setProperty("--attnbook-cue-width", Math.min(16, Math.max(hidden, 0)) + "px");
  }

  function update(wrapper) {
    edges(wrapper.firstElementChild, wrapper);
  }

  // A formula whose drawing is wider than its box: an inline one becomes a scroll box, and
  // either kind carries the cues itself (it sits in a line of text, or beside its number).
  function markWideFormulas() {
    document.querySelectorAll(".bd-content span.math, .bd-content div.math > mjx-container")
      .forEach(function (box) {
        var inline = box.tagName === "SPAN";
        var drawn = box.querySelector(inline ? ":scope > mjx-container > mjx-math"
                                             : ":scope > mjx-math");
        if (!drawn) { return; }
        var wide = drawn.getBoundingClientRect().width > box.clientWidth + 1;
        if (inline) { box.classList.toggle("attnbook-scrolls", wide); }
        if (!wide) {
          box.classList.remove("attnbook-more-left", "attnbook-more-right");
          return;
        }
        if (!box.hasAttribute("data-attnbook-cue")) {
          box.setAttribute("data-attnbook-cue", "");
          box.addEventListener("scroll", function () { edges(box, box); }, { passive: true });
        }
        edges(box, box);
      });
  }

  // Call `measure` again as the window is resized, at most once a frame.
  function onResize(measure) {
    var pending = false;
    window.addEventListener("resize", function () {
      if (pending) { return; }
      pending = true;
      requestAnimationFrame(function () { pending = false; measure(); });
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
      var table = wrapper.firstElementChild.firstElementChild;
      if (watch && table && table.tagName === "TABLE") { watch.observe(table); }
    }
    // A code block's size changes with its wrapper's only (a folded input opens: from 0).
    document.querySelectorAll(BOXES + ", " + CODE).forEach(function (box) {
      var wrapper = document.createElement("div");
      wrapper.className = box.tagName === "PRE" ? "attnbook-scroll-cue attnbook-code-cue"
                                                : "attnbook-scroll-cue";
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
    // Once MathJax has drawn the formulas (in a table's cells too), measure again.
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
    onResize(markWideFormulas);
  }

  // A figure shown at under SHRUNK of its own size (on a phone, where its smallest text is
  // then about 5 px) says in its caption how small it is shown, and that a tap opens it at
  // full size (openFullSize, in a view over the page; the whole figure is also a link to
  // its picture, which is what a browser without this script opens).
  var SHRUNK = 0.6, WHOLE = 0.98;
  function markShrunkFigures() {
    document.querySelectorAll(".bd-content a.attnbook-figure-link > img")
      .forEach(function (img) {
        if (!img.naturalWidth) { return; }
        // The figure is marked and its caption says the note; a picture without a caption
        // gets a line of its own after it, which does both.
        var figure = img.closest("figure");
        var caption = figure && figure.querySelector(":scope > figcaption");
        var marked = figure;
        if (!caption) {
          var link = img.parentNode;
          caption = link.nextElementSibling;
          if (!caption || !caption.classList.contains("attnbook-shrunk-note")) {
            caption = document.createElement("p");
            caption.className = "attnbook-shrunk-note";
            link.parentNode.insertBefore(caption, link.nextSibling);
          }
          marked = caption;
        }
        var shown = img.getBoundingClientRect().width / img.naturalWidth;
        marked.classList.toggle("attnbook-shrunk", shown < SHRUNK);
        caption.setAttribute("data-attnbook-shown", String(Math.round(100 * shown)));
      });
  }

  // A tap on a figure shown under its own size opens it at that size in a view over the
  // page, which scrolls both ways (a picture opened alone, the link's own target, is
  // fitted to a phone's screen again: a figure shown at 70 % opened at 40 %). Close or
  // Escape returns to the figure. A figure shown whole keeps the plain link.
  function openFullSize(link, img) {
    var view = document.createElement("div");
    view.className = "attnbook-full";
    view.setAttribute("role", "dialog");
    view.setAttribute("aria-modal", "true");
    view.setAttribute("aria-label", "The figure at its own size");
    var close = document.createElement("button");
    close.type = "button";
    close.className = "attnbook-full-close";
    close.textContent = "Close";
    var big = document.createElement("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    big.width = img.naturalWidth;
    view.appendChild(close);
    view.appendChild(big);
    document.body.appendChild(view);
    close.focus();
    function shut() {
      view.remove();
      document.removeEventListener("keydown", onKey);
      link.focus();
    }
    function onKey(event) { if (event.key === "Escape") { shut(); } }
    close.addEventListener("click", shut);
    document.addEventListener("keydown", onKey);
  }

  function watchFigures() {
    document.querySelectorAll(".bd-content a.attnbook-figure-link > img")
      .forEach(function (img) {
        if (!img.complete) { img.addEventListener("load", markShrunkFigures); }
        var link = img.parentNode;
        link.addEventListener("click", function (event) {
          // Any figure shown smaller than its own size (the caption's note is for the
          // smallest, under SHRUNK), measured as the reader taps.
          if (!img.naturalWidth ||
              img.getBoundingClientRect().width / img.naturalWidth >= WHOLE) { return; }
          event.preventDefault();
          openFullSize(link, img);
        });
      });
    markShrunkFigures();
    onResize(markShrunkFigures);
  }

  function showCurrentChapterInDrawer() {
    var drawer = document.getElementById("pst-primary-sidebar-modal");
    if (!drawer || !window.MutationObserver) { return; }
    new MutationObserver(function () {
      var current = drawer.open && drawer.querySelector("nav.bd-links a.current");
      if (current) { current.scrollIntoView({ block: "center" }); }
    }).observe(drawer, { attributes: true, attributeFilter: ["open"] });
  }

  // The theme scrolls the sidebar to the current chapter, wherever that leaves the list's
  // lines: often one of them half under the pinned search row ("by step" alone, the rest
  // of "5. Attention in PyTorch, step by step" hidden). Once it has, the list moves down to
  // show that entry whole.
  function showSidebarEntryWhole() {
    var sidebar = document.querySelector("div.bd-sidebar");
    var field = sidebar && sidebar.querySelector(".search-button-field");
    var row = field && field.closest(".sidebar-primary-item");
    if (!row || sidebar.scrollTop <= 0) { return; }
    var edge = row.getBoundingClientRect().bottom, cut = null;
    sidebar.querySelectorAll("nav.bd-docs-nav a, nav.bd-docs-nav p.caption")
      .forEach(function (entry) {
        var box = entry.getBoundingClientRect();
        if (!cut && box.height > 0 && box.top < edge - 1 && box.bottom > edge + 1) {
          cut = box;
        }
      });
    if (cut) { sidebar.scrollTop -= Math.ceil(edge - cut.top); }
  }

  // A table cell that holds one number, a count "58 of 72" or a range "2.69 to 2.74",
  // keeps it on one line: "7.18e-01" broke after its "e-" in a phone's narrow column, and
  // the table scrolls sideways anyway.
  var NUMBER = /^\s*[-+\u2212]?[\d.,]+(e[-+\u2212]?\d+)?\s*%?(\s+(of|to)\s+[\d.,]+)?\s*$/i;
  function keepNumbersWhole() {
    document.querySelectorAll(".bd-content table td").forEach(function (cell) {
      if (NUMBER.test(cell.textContent)) { cell.classList.add("attnbook-number"); }
    });
  }

  function setUp() {
    keepNumbersWhole();
    addCues();
    watchFigures();
    showCurrentChapterInDrawer();
    window.addEventListener("load", function () {
      requestAnimationFrame(showSidebarEntryWhole);
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUp);
  } else {
    setUp();
  }
})();
