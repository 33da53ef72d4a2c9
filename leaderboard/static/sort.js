// Click a column header of a table.sortable to sort its rows (again to reverse). A header may carry data-col (its
// column index, for tables with two header rows) and data-sort-first="descending" (higher is better: best first).
// Cells may carry data-sort with the value to sort on; empty values sort last. Each tbody is sorted on its own, so
// reference points stay apart from the ranked rows; rows of class group-head stay on top. Without script the table
// keeps the order it was built in.
document.querySelectorAll("table.sortable").forEach(function (table) {
  var rows = table.tHead ? table.tHead.rows : [];
  var heads = [];
  for (var i = 0; i < rows.length; i++) {
    var cells = rows[i].cells;
    for (var j = 0; j < cells.length; j++) {
      var th = cells[j];
      if (rows.length === 1 || th.hasAttribute("data-col")) { heads.push(th); }
    }
  }
  heads.forEach(function (th) {
    var col = th.hasAttribute("data-col") ? parseInt(th.getAttribute("data-col"), 10) : th.cellIndex;
    th.classList.add("sortable-head");
    th.setAttribute("tabindex", "0");
    var sort = function () {
      var first = th.getAttribute("data-sort-first") === "descending" ? -1 : 1;
      var current = th.getAttribute("aria-sort");
      var dir = current === null ? first : (current === "ascending" ? -1 : 1);
      heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
      var key = function (row) {
        var c = row.cells[col];
        if (!c) { return null; }
        var v = c.hasAttribute("data-sort") ? c.getAttribute("data-sort") : c.textContent.trim();
        return v === "" ? null : (isFinite(v) ? parseFloat(v) : v.toLowerCase());
      };
      Array.prototype.forEach.call(table.tBodies, function (body) {
        var all = Array.prototype.slice.call(body.rows);
        var fixed = all.filter(function (r) { return r.classList.contains("group-head"); });
        var moving = all.filter(function (r) { return !r.classList.contains("group-head"); });
        moving.sort(function (a, b) {
          var x = key(a), y = key(b);
          if (x === null || y === null) { return x === y ? 0 : (x === null ? 1 : -1); }
          if (typeof x !== typeof y) { return typeof x === "number" ? -1 : 1; }
          return (x < y ? -1 : x > y ? 1 : 0) * dir;
        });
        fixed.concat(moving).forEach(function (r) { body.appendChild(r); });
      });
    };
    th.addEventListener("click", function (ev) { if (ev.target.closest("a")) { return; } sort(); });
    th.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); sort(); }
    });
  });
});
