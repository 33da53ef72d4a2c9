// Filters (nav.filters): without script each value is a link to its own page (the partition's,
// the track's, the method's). With script a click shows only the matching rows, columns and answer
// blocks of this page instead: an element carrying data-f-<kind> stays visible when its value is
// the chosen one; a second click shows all again. Each value is then a toggle button (role=button,
// aria-pressed) that Enter and Space both press.
(function () {
  var chosen = {};
  var apply = function () {
    ["task", "partition", "method"].forEach(function (kind) {
      document.querySelectorAll("[data-f-" + kind + "]").forEach(function (el) {
        var want = chosen[kind];
        var hide = want !== undefined && el.getAttribute("data-f-" + kind) !== want;
        el.classList.toggle("f-hidden-" + kind, hide);
      });
    });
    document.querySelectorAll("a.filter").forEach(function (a) {
      var on = chosen[a.getAttribute("data-filter")] === a.getAttribute("data-value");
      a.classList.toggle("chosen", on);
      a.setAttribute("aria-pressed", a.classList.contains("chosen") ? "true" : "false");
    });
  };
  document.querySelectorAll("a.filter").forEach(function (a) {
    a.setAttribute("role", "button");
    a.setAttribute("aria-pressed", "false");
    var toggle = function () {
      var kind = a.getAttribute("data-filter"), value = a.getAttribute("data-value");
      if (chosen[kind] === value) { delete chosen[kind]; } else { chosen[kind] = value; }
      apply();
    };
    a.addEventListener("click", function (ev) { ev.preventDefault(); toggle(); });
    // a button answers Space as well as Enter (Enter already clicks a link); Space must not scroll
    a.addEventListener("keydown", function (ev) {
      if (ev.key === " " || ev.key === "Spacebar") { ev.preventDefault(); toggle(); }
    });
  });
  document.documentElement.classList.add("js");
})();
