/* preflight report: filter the findings table. Text only via textContent. */
(function () {
  "use strict";
  // The charts are inline SVG, drawn with the page; say so for whoever waits on them (tests, screenshots).
  var charts = document.querySelectorAll(".chart-block").length;
  document.documentElement.setAttribute("data-ready-ms", String(Math.round(performance.now())));
  document.documentElement.setAttribute("data-ready", String(charts));

  var rows = Array.prototype.slice.call(document.querySelectorAll("#findings-table tr.finding"));
  rows.forEach(function (row) { row._hosts = JSON.parse(row.getAttribute("data-hosts") || "[]"); });
  var severity = document.getElementById("filter-severity");
  var check = document.getElementById("filter-check");
  var host = document.getElementById("filter-host");
  var search = document.getElementById("filter-search");
  var count = document.getElementById("filter-count");

  function apply() {
    var needle = search.value.trim().toLowerCase();
    var shown = 0;
    rows.forEach(function (row) {
      var ok = (!severity.value || row.getAttribute("data-severity") === severity.value) &&
        (!check.value || row.getAttribute("data-check") === check.value) &&
        (!host.value || row._hosts.indexOf(host.value) >= 0) &&
        (!needle || row.textContent.toLowerCase().indexOf(needle) >= 0);
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = shown + " of " + rows.length + " shown";
  }
  [severity, check, host].forEach(function (el) { el.addEventListener("change", apply); });
  search.addEventListener("input", apply);
  apply();

  // Every copy button (the exclude list, the kept hosts) copies the text of the element it names.
  Array.prototype.forEach.call(document.querySelectorAll("button[data-copy]"), function (copy) {
    copy.addEventListener("click", function () {
      var text = document.getElementById(copy.getAttribute("data-copy")).textContent;
      if (navigator.clipboard) {
        navigator.clipboard.writeText(text).then(function () { copy.textContent = "copied"; },
          function () { copy.textContent = "select and copy"; });
      }
    });
  });
})();
