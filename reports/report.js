/* rlwh report pages: draw each figure from the JSON beside it. No network, no eval.
 * Data strings reach the page only through textContent, or escaped for Plotly, whose
 * labels are pseudo-HTML: an op name like "</script><img ...>" shows as text. */
(function () {
  "use strict";

  var CONFIG = { responsive: true, displaylogo: false };

  function readJson(id) {
    var element = document.getElementById(id);
    return element ? JSON.parse(element.textContent) : null;
  }

  function esc(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function mib(bytes) {
    return (bytes / 1048576).toFixed(3);
  }

  function size(bytes) {
    if (bytes >= 1048576) return (bytes / 1048576).toFixed(1) + " MiB";
    if (bytes >= 1024) return (bytes / 1024).toFixed(1) + " KiB";
    return bytes + " B";
  }

  function drawFigures() {
    document.querySelectorAll("[data-figure]").forEach(function (div) {
      var fig = readJson(div.getAttribute("data-figure"));
      Plotly.newPlot(div, fig.data, fig.layout, CONFIG);
    });
  }

  /* One memory timeline: live line, allocator lines, allocation bars, and an inspector
   * listing the largest live blocks at the hovered time and the clicked call stack. */
  function MemoryPanel(root) {
    var d = readJson(root.getAttribute("data-memory"));
    this.d = d;
    this.root = root;
    this.div = root.querySelector(".figure");
    var live = d.figure.data[d.live.trace];
    this.x = live.x;
    live.hovertext = live.x.map(this.liveText, this);
    d.figure.data.forEach(function (trace) {
      if (trace.type === "bar") {
        trace.hovertext = trace.customdata.map(function (c, i) {
          return esc(d.names[c[1]]) + "<br>" + size(c[3]) + "<br>" + esc(this.top(c[2]));
        }, this);
      }
    }, this);
    Plotly.newPlot(this.div, d.figure.data, d.figure.layout, CONFIG);
    var self = this;
    this.div.on("plotly_hover", function (event) { self.hover(event); });
    this.div.on("plotly_click", function (event) { self.click(event); });
    this.showLive(d.live.peak);
  }

  MemoryPanel.prototype.top = function (index) {
    return index < 0 ? "(no call stack)" : this.d.tops[index];
  };

  MemoryPanel.prototype.liveText = function (x, i) {
    var d = this.d, lines = ["t = " + x + " ms, live " + size(d.live.bytes[i])];
    var blocks = d.live.hover[i];
    if (blocks === null) {
      lines.push("(live blocks not listed for this point: data reduced)");
    } else {
      blocks.forEach(function (b) {
        lines.push(esc(d.names[d.blocks.name[b]]) + "  " + size(d.blocks.size[b]) + "  " +
                   esc(this.top(d.blocks.top[b])));
      }, this);
    }
    return lines.join("<br>");
  };

  /* The live point at or before time x: the state of memory at that time. */
  MemoryPanel.prototype.liveIndexAt = function (x) {
    var lo = 0, hi = this.x.length - 1;
    if (x <= this.x[0]) return 0;
    while (lo < hi) {
      var mid = (lo + hi + 1) >> 1;
      if (this.x[mid] <= x) lo = mid; else hi = mid - 1;
    }
    return lo;
  };

  MemoryPanel.prototype.hover = function (event) {
    var point = event.points[0];
    var i = point.curveNumber === this.d.live.trace ? point.pointNumber : this.liveIndexAt(point.x);
    this.showLive(i);
  };

  MemoryPanel.prototype.click = function (event) {
    var point = event.points[0], d = this.d;
    if (point.data.type === "bar") {
      var c = point.data.customdata[point.pointNumber];
      this.showStack(c[0], d.names[c[1]] + ", " + size(c[3]));
    } else {
      var i = point.curveNumber === d.live.trace ? point.pointNumber : this.liveIndexAt(point.x);
      this.showStack(d.live.stack[i], d.names[d.live.name[i]] + " (" + d.live.event[i] + ")");
    }
  };

  MemoryPanel.prototype.showLive = function (i) {
    var d = this.d, body = this.root.querySelector(".live-blocks tbody"), self = this;
    this.root.querySelector(".live-at").textContent =
      "at " + this.x[i] + " ms (live " + size(d.live.bytes[i]) + ")";
    while (body.firstChild) body.removeChild(body.firstChild);
    var blocks = d.live.hover[i];
    if (blocks === null) {
      var row = body.insertRow(), cell = row.insertCell();
      cell.colSpan = 3;
      cell.textContent = "Not listed for this point: data reduced (see the note above).";
      return;
    }
    blocks.forEach(function (b) {
      var row = body.insertRow();
      row.insertCell().textContent = d.names[d.blocks.name[b]];
      var sizeCell = row.insertCell();
      sizeCell.textContent = mib(d.blocks.size[b]);
      sizeCell.className = "num";
      row.insertCell().textContent = self.top(d.blocks.top[b]);
      row.addEventListener("click", function () {
        self.showStack(d.blocks.stack[b], d.names[d.blocks.name[b]] + ", " + size(d.blocks.size[b]));
      });
    });
  };

  MemoryPanel.prototype.showStack = function (index, label) {
    var d = this.d;
    this.root.querySelector(".stack-of").textContent = "of " + label;
    this.root.querySelector(".call-stack").textContent = index < 0
      ? "(no call stack recorded for this allocation)"
      : d.stacks[index].map(function (f) { return d.frames[f]; }).join("\n");
  };

  function start() {
    drawFigures();
    window.rlwhPanels = [];
    document.querySelectorAll("[data-memory]").forEach(function (root) {
      window.rlwhPanels.push(new MemoryPanel(root));
    });
    document.documentElement.setAttribute("data-rlwh-drawn", "true");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
