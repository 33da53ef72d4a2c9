// The compare page: A − B on every track column both have, from the numbers the build wrote into
// the page (#compare-data, every pair's difference computed by leaderboard/compare.py with the
// site's one test). Nothing is fetched, so the page works from file://. Rows are built with
// textContent only. The page's address names the pair (#a=LABEL&b=LABEL, or #a=METHOD from a
// method page).
(function () {
  var holder = document.getElementById("compare-data");
  if (!holder) { return; }
  var data = JSON.parse(holder.getAttribute("data-json"));
  var selA = document.getElementById("compare-a"), selB = document.getElementById("compare-b");
  var body = document.getElementById("compare-body"), caption = document.getElementById("compare-caption");
  var signed = function (x) {
    if (x === null) { return "—"; }
    return (x >= 0 ? "+" : "−") + Math.abs(x).toFixed(2);
  };
  var cell = function (tr, text, cls, href) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    if (href) {
      var a = document.createElement("a");
      a.href = href;
      a.textContent = text;
      td.appendChild(a);
    } else {
      td.textContent = text;
    }
    tr.appendChild(td);
    return td;
  };
  var rows = function (a, b) {
    var i = Math.min(a, b), j = Math.max(a, b), sign = a < b ? 1 : -1;
    return (data.pairs[i + "," + j] || []).map(function (d) {
      var c = data.columns[d[0]], delta = d[1], low = d[2], high = d[3];
      if (sign < 0) {
        var l = low;
        low = high === null ? null : -high;
        high = l === null ? null : -l;
        delta = delta === null ? null : -delta;
      }
      var within = low === null || high === null || (low <= 0 && 0 <= high);
      var better = delta !== null && (c.higher ? delta > 0 : delta < 0);
      return {
        c: c, col: d[0], delta: delta, low: low, high: high, within: within,
        test: d[4] ? "paired over " + d[5] + " seed" + (d[5] !== 1 ? "s" : "") : "Welch",
        ahead: within ? "" : data.configs[better ? a : b].label
      };
    });
  };
  var draw = function () {
    var a = parseInt(selA.value, 10), b = parseInt(selB.value, 10);
    var list = a === b ? [] : rows(a, b);
    while (body.firstChild) { body.removeChild(body.firstChild); }
    caption.textContent = data.configs[a].label + " − " + data.configs[b].label + " on " +
      list.length + " track column" + (list.length !== 1 ? "s" : "");
    if (!list.length) {
      var tr = document.createElement("tr");
      var td = cell(tr, a === b ? "Pick two different methods." : "These two have no track column in common.", "muted");
      td.colSpan = 7;
      body.appendChild(tr);
    }
    list.forEach(function (r) {
      var tr = document.createElement("tr");
      var ca = data.cells[a + "," + r.col], cb = data.cells[b + "," + r.col];
      var place = cell(tr, "", "", null);
      var link = document.createElement("a");
      link.href = "tracks/" + r.c.track_file;
      link.textContent = r.c.dataset + " " + r.c.track;
      place.appendChild(link);
      place.appendChild(document.createTextNode(" "));
      var part = document.createElement("abbr");
      part.title = r.c.partition_words;
      part.textContent = r.c.partition;
      place.appendChild(part);
      var verdict = cell(tr, (r.within ? "within noise" : "beyond noise") + (r.ahead ? ": " + r.ahead + " ahead" : ""), "verdict");
      [["A", a, ca], ["B", b, cb]].forEach(function (side) {
        if (!side[2].flag) { return; }
        verdict.appendChild(document.createElement("br"));
        var badge = document.createElement("span");
        badge.className = "badge warn";
        badge.title = side[2].flag;
        badge.textContent = side[0] + " not like for like";
        verdict.appendChild(badge);
        verdict.appendChild(document.createTextNode(" "));
        var why = document.createElement("span");
        why.className = "std flag";
        why.textContent = data.configs[side[1]].label + ": " + side[2].flag;
        verdict.appendChild(why);
      });
      cell(tr, signed(r.delta), "num");
      cell(tr, r.low === null || r.high === null ? "—" : "[" + signed(r.low) + ", " + signed(r.high) + "]", "num");
      cell(tr, ca.mean.toFixed(2), "num", "entries/" + ca.entry);
      cell(tr, cb.mean.toFixed(2), "num", "entries/" + cb.entry);
      cell(tr, r.test);
      body.appendChild(tr);
    });
    var hash = "#a=" + encodeURIComponent(data.configs[a].label) + "&b=" + encodeURIComponent(data.configs[b].label);
    if (window.history && history.replaceState) { history.replaceState(null, "", hash); }
  };
  var pick = function (sel, want) {
    if (!want) { return; }
    for (var k = 0; k < data.configs.length; k++) {
      if (data.configs[k].label === want) { sel.value = String(k); return; }
    }
    for (var m = 0; m < data.configs.length; m++) {
      if (data.configs[m].method === want) { sel.value = String(m); return; }
    }
  };
  var params = {};
  location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
    var p = kv.split("=");
    if (p.length === 2) { params[p[0]] = decodeURIComponent(p[1]); }
  });
  pick(selA, params.a);
  pick(selB, params.b);
  if (selA.value === selB.value) { selB.value = String(selA.value === "0" ? 1 : 0); }
  selA.addEventListener("change", draw);
  selB.addEventListener("change", draw);
  if (params.a || params.b) { draw(); }
})();
