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

  /* A point of the x axis in words: a time, or a position where the source records no time. */
  function at(x, unit) {
    return unit === "position" ? "at trace position " + x : "at t = " + x + " " + unit;
  }

  function drawFigures() {
    document.querySelectorAll("[data-figure]").forEach(function (div) {
      var fig = readJson(div.getAttribute("data-figure"));
      Plotly.newPlot(div, fig.data, fig.layout, CONFIG);
    });
  }

  /* A frame (or path) as text nodes with a line-break chance after each "/": frames
   * wrap at directory boundaries and spaces, never inside a name. */
  function frameNode(text, className) {
    var span = document.createElement("span");
    span.className = "frame" + (className ? " " + className : "");
    String(text).split("/").forEach(function (part, i, parts) {
      span.appendChild(document.createTextNode(part + (i < parts.length - 1 ? "/" : "")));
      if (i < parts.length - 1) span.appendChild(document.createElement("wbr"));
    });
    return span;
  }

  var HOW = { op: "stack of the op", forward_op: "stack of its forward op", enclosing_op: "stack of the enclosing op",
              allocation: "stack recorded by the allocator" };

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
        trace.hovertext = trace.customdata.map(function (c) {
          var lines = [esc(d.names[c[1]]) + ", " + size(c[3])];
          if (c[4] >= 0) lines.push(esc(d.tops[c[4]]));
          if (c[2] !== c[4]) lines.push(esc(this.top(c[2])));
          return lines.join("<br>");
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

  /* The frame that says where a block came from: user_frame, else call_stack_top. */
  MemoryPanel.prototype.where = function (b) {
    var blocks = this.d.blocks;
    return this.top(blocks.user[b] >= 0 ? blocks.user[b] : blocks.top[b]);
  };

  MemoryPanel.prototype.liveText = function (x, i) {
    var d = this.d, lines = [at(x, d.unit) + ", live " + size(d.live.bytes[i])];
    var blocks = d.live.hover[i];
    if (blocks === null) {
      lines.push("(live blocks not listed for this point: data reduced)");
    } else {
      blocks.forEach(function (b) {
        lines.push(esc(d.names[d.blocks.name[b]]) + "  " + size(d.blocks.size[b]) + "  " + esc(this.where(b)));
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
      this.showStack(c[0], d.names[c[1]] + ", " + size(c[3]), c[4] >= 0 ? d.tops[c[4]] : null);
    } else {
      var i = point.curveNumber === d.live.trace ? point.pointNumber : this.liveIndexAt(point.x);
      this.showStack(d.live.stack[i], d.names[d.live.name[i]] + " (" + d.live.event[i] + ")", null);
    }
  };

  MemoryPanel.prototype.whereCell = function (cell, b) {
    var blocks = this.d.blocks, user = blocks.user[b], top = blocks.top[b];
    cell.className = "where";
    if (user >= 0) cell.appendChild(frameNode(this.d.tops[user], "user"));
    if (top !== user || user < 0) {
      if (cell.firstChild) cell.appendChild(document.createElement("br"));
      cell.appendChild(frameNode(this.top(top), "top"));
    }
  };

  MemoryPanel.prototype.opCell = function (cell, b) {
    var how = this.d.blocks.source[b];
    cell.className = "op";
    cell.appendChild(document.createTextNode(this.d.names[this.d.blocks.name[b]]));
    if (how) {
      var note = document.createElement("div");
      note.className = "how";
      note.textContent = HOW[how] || how;
      cell.appendChild(note);
    }
  };

  MemoryPanel.prototype.showLive = function (i) {
    var d = this.d, body = this.root.querySelector(".live-blocks tbody"), self = this;
    this.root.querySelector(".live-at").textContent =
      at(this.x[i], d.unit) + " (live " + size(d.live.bytes[i]) + ")";
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
      self.opCell(row.insertCell(), b);
      var sizeCell = row.insertCell();
      sizeCell.textContent = mib(d.blocks.size[b]);
      sizeCell.className = "num";
      self.whereCell(row.insertCell(), b);
      row.addEventListener("click", function () {
        var user = d.blocks.user[b];
        self.showStack(d.blocks.stack[b], d.names[d.blocks.name[b]] + ", " + size(d.blocks.size[b]),
                       user >= 0 ? d.tops[user] : null);
      });
    });
  };

  /* The whole stack, innermost frame first, the block's user_frame highlighted. */
  MemoryPanel.prototype.showStack = function (index, label, userFrame) {
    var d = this.d, list = this.root.querySelector(".call-stack");
    this.root.querySelector(".stack-of").textContent = "of " + label;
    while (list.firstChild) list.removeChild(list.firstChild);
    if (index < 0) {
      var none = document.createElement("li");
      none.className = "hint";
      none.textContent = "(no call stack recorded for this allocation)";
      list.appendChild(none);
      return;
    }
    d.stacks[index].forEach(function (f) {
      var item = document.createElement("li"), text = d.frames[f];
      if (text === userFrame) item.className = "user";
      item.appendChild(frameNode(text));
      list.appendChild(item);
    });
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
