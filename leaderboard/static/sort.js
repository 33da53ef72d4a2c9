// Click a column header of a table.sortable to sort its rows (again to reverse). Cells may carry data-sort with the
// value to sort on; empty values sort last. Without script the table keeps the order it was built in.
document.querySelectorAll("table.sortable").forEach(function (table) {
  var heads = table.querySelectorAll("thead th");
  heads.forEach(function (th, col) {
    th.classList.add("sortable-head");
    th.addEventListener("click", function () {
      var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
      heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
      var key = function (row) {
        var c = row.cells[col], v = c.hasAttribute("data-sort") ? c.getAttribute("data-sort") : c.textContent.trim();
        return v === "" ? null : (isFinite(v) ? parseFloat(v) : v.toLowerCase());
      };
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === null || y === null) { return x === y ? 0 : (x === null ? 1 : -1); }
        if (typeof x !== typeof y) { return typeof x === "number" ? -1 : 1; }
        return (x < y ? -1 : x > y ? 1 : 0) * dir;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
