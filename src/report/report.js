// planc report: zooming the timeline along time. The plot is a nested <svg> whose viewBox
// narrows as one zooms; its text (class "k") is scaled back so that it stays upright.
// The address may say where to look: #zoom=4&at=0.25 (at: the fraction of the plot at the
// left edge), #memory (a section), or both: #timeline&zoom=8; #only=memory shows that
// section alone (to print it, or to screenshot it).
(function () {
  "use strict";
  var status = document.getElementById("report-status");
  var plot = document.getElementById("timeline-plot");
  var MAX_ZOOM = 400;
  var SVG = "http://www.w3.org/2000/svg";

  // A spacing of 1, 2 or 5 × 10^k at least `raw`.
  function nice(raw) {
    var base = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * base >= raw) return steps[i] * base;
    return raw;
  }

  function hashParams() {
    var out = { section: null, zoom: null, at: null, only: null };
    location.hash.replace(/^#/, "").split("&").forEach(function (part) {
      if (!part) return;
      var kv = part.split("=");
      if (kv.length === 1) out.section = decodeURIComponent(kv[0]);
      else if (kv[0] === "zoom") out.zoom = parseFloat(kv[1]);
      else if (kv[0] === "at") out.at = parseFloat(kv[1]);
      else if (kv[0] === "only") out.only = decodeURIComponent(kv[1]);
    });
    return out;
  }

  function setupZoom() {
    var outer = plot.ownerSVGElement;
    var width = parseFloat(plot.getAttribute("data-width"));
    var height = plot.viewBox.baseVal.height;
    var plotX = parseFloat(plot.getAttribute("x"));
    var outerWidth = outer.viewBox.baseVal.width;
    var texts = plot.querySelectorAll("text.k");
    var names = plot.querySelectorAll("text.pl");
    var ticks = plot.querySelector("g.ticks");
    var tickTop = ticks ? parseFloat(ticks.getAttribute("data-top")) : 0;
    var tickBottom = ticks ? parseFloat(ticks.getAttribute("data-bottom")) : 0;
    var span = parseFloat(plot.getAttribute("data-span"));
    var segments = (plot.getAttribute("data-segments") || "").split(";").map(function (g) {
      var v = g.split(" ").map(parseFloat);
      return { t0: v[0], t1: v[1], x0: v[2], x1: v[3], folded: v[4] === 1 };
    });
    var level = document.getElementById("zoom-level");
    var view = { zoom: 1, left: 0 };

    function apply() {
      view.zoom = Math.min(MAX_ZOOM, Math.max(1, view.zoom));
      var w = width / view.zoom;
      view.left = Math.min(width - w, Math.max(0, view.left));
      plot.setAttribute("viewBox", view.left.toFixed(3) + " 0 " + w.toFixed(3) + " " + height);
      plot.setAttribute("data-zoom", String(view.zoom));
      var k = 1 / view.zoom;
      for (var i = 0; i < texts.length; i++) {
        var x = texts[i].getAttribute("x");
        texts[i].setAttribute("transform", view.zoom === 1 ? "" :
          "translate(" + x + " 0) scale(" + k + " 1) translate(" + -x + " 0)");
      }
      for (var j = 0; j < names.length; j++) {
        var wide = parseFloat(names[j].getAttribute("data-w")) * view.zoom > 16;
        names[j].setAttribute("visibility", wide ? "visible" : "hidden");
      }
      drawTicks(view.left, w);
      level.textContent = "×" + (Math.round(view.zoom * 10) / 10);
    }

    // Grid lines and labels for the visible stretch of time, about eight across.
    function drawTicks(left, w) {
      if (!ticks) return;
      while (ticks.firstChild) ticks.removeChild(ticks.firstChild);
      var visible = [];
      var total = 0;
      segments.forEach(function (g) {
        if (g.folded || g.x1 <= left || g.x0 >= left + w || g.x1 <= g.x0) return;
        var k = (g.t1 - g.t0) / (g.x1 - g.x0);
        var a = g.t0 + (Math.max(left, g.x0) - g.x0) * k;
        var b = g.t0 + (Math.min(left + w, g.x1) - g.x0) * k;
        visible.push({ g: g, a: a, b: b });
        total += b - a;
      });
      if (total <= 0) return;
      var dt = nice(total / 8);
      var unit = span < 1 ? 1e3 : 1;
      var digits = Math.max(0, -Math.floor(Math.log10(dt * unit) + 1e-9));
      visible.forEach(function (v) {
        for (var t = Math.ceil(v.a / dt) * dt; t <= v.b + dt * 1e-6; t += dt) {
          var x = v.g.x0 + (t - v.g.t0) * (v.g.x1 - v.g.x0) / (v.g.t1 - v.g.t0);
          var line = document.createElementNS(SVG, "line");
          line.setAttribute("x1", x); line.setAttribute("x2", x);
          line.setAttribute("y1", tickTop); line.setAttribute("y2", tickBottom);
          line.setAttribute("stroke", "#00000022");
          line.setAttribute("vector-effect", "non-scaling-stroke");
          ticks.appendChild(line);
          var text = document.createElementNS(SVG, "text");
          text.setAttribute("x", x); text.setAttribute("y", tickBottom + 14);
          // The label at the plot's left edge starts there rather than centring off it.
          text.setAttribute("text-anchor", (x - left) * view.zoom < 20 ? "start" : "middle");
          text.setAttribute("transform", "translate(" + x + " 0) scale(" + 1 / view.zoom + " 1) translate(" + -x + " 0)");
          text.textContent = (t * unit).toFixed(digits) + (span < 1 ? " ms" : " s");
          ticks.appendChild(text);
        }
      });
    }

    // The fraction of the visible plot under a pointer's clientX.
    function fraction(clientX) {
      var r = outer.getBoundingClientRect();
      var units = (clientX - r.left) * outerWidth / r.width;
      return Math.min(1, Math.max(0, (units - plotX) / width));
    }

    function zoomAt(factor, f) {
      var w = width / view.zoom;
      var t = view.left + f * w;
      view.zoom *= factor;
      view.zoom = Math.min(MAX_ZOOM, Math.max(1, view.zoom));
      view.left = t - f * width / view.zoom;
      apply();
    }

    outer.addEventListener("wheel", function (e) {
      e.preventDefault();
      zoomAt(Math.exp(-e.deltaY * 0.002), fraction(e.clientX));
    }, { passive: false });

    var drag = null;
    outer.addEventListener("mousedown", function (e) {
      drag = { x: e.clientX, left: view.left };
      outer.classList.add("dragging");
    });
    window.addEventListener("mousemove", function (e) {
      if (!drag) return;
      var r = outer.getBoundingClientRect();
      var units = (e.clientX - drag.x) * outerWidth / r.width;
      view.left = drag.left - units / view.zoom;
      apply();
    });
    window.addEventListener("mouseup", function () {
      drag = null;
      outer.classList.remove("dragging");
    });

    document.getElementById("zoom-in").addEventListener("click", function () { zoomAt(2, 0.5); });
    document.getElementById("zoom-out").addEventListener("click", function () { zoomAt(0.5, 0.5); });
    document.getElementById("zoom-reset").addEventListener("click", function () {
      view.zoom = 1; view.left = 0; apply();
    });

    function fromHash() {
      var h = hashParams();
      if (h.zoom !== null && isFinite(h.zoom)) {
        view.zoom = h.zoom;
        var at = h.at !== null && isFinite(h.at) ? h.at : 0;
        view.left = at * width;
        apply();
      }
    }
    window.addEventListener("hashchange", fromHash);
    fromHash();
    apply();
  }

  function scrollToSection() {
    var h = hashParams();
    var sections = document.querySelectorAll("section");
    for (var i = 0; i < sections.length; i++) {
      sections[i].hidden = h.only !== null && sections[i].id !== h.only;
    }
    var target = h.section && document.getElementById(h.section);
    if (target && (h.zoom !== null || h.at !== null)) target.scrollIntoView();
  }

  if (plot) setupZoom();
  scrollToSection();
  window.addEventListener("hashchange", scrollToSection);
  status.textContent = "interactive";
  document.body.setAttribute("data-report", "ready");
})();
