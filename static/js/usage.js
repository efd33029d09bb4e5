// Settings → Usage and the profile's usage: draws each table's chart with the vendored
// Chart.js, from the JSON in #usage-data's data-charts (no inline script: the CSP allows none). The tables
// beside the charts hold the same figures, exactly; the charts are only a picture of them.
(function () {
  "use strict";
  var COLOURS = ["#3b6fd8", "#e08a2c", "#3aa57a", "#b0479e", "#8a8f98", "#d14b4b", "#5fb3c9"];

  function draw() {
    var source = document.getElementById("usage-data");
    if (!source) return;
    if (typeof window.Chart === "undefined") {
      // Swapped in by htmx, the two scripts load in either order: draw once Chart.js has.
      var tag = document.querySelector('script[src*="chart.umd"]');
      if (tag) tag.addEventListener("load", draw, { once: true });
      return;
    }
    var charts = JSON.parse(source.dataset.charts);
    charts.forEach(function (spec) {
      var canvas = document.getElementById("chart-" + spec.key);
      if (!canvas || canvas.dataset.drawn) return;
      var datasets = spec.datasets.map(function (set, i) {
        return {
          label: set.label,
          data: set.data,
          backgroundColor: COLOURS[i % COLOURS.length],
          borderColor: COLOURS[i % COLOURS.length],
        };
      });
      new window.Chart(canvas, {
        type: spec.type,
        data: { labels: spec.labels, datasets: datasets },
        options: {
          animation: false,
          responsive: true,
          maintainAspectRatio: false,
          scales: {
            x: { stacked: spec.stacked },
            y: { stacked: spec.stacked, beginAtZero: true },
          },
        },
      });
      canvas.dataset.drawn = "1";
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
  // A page reached by htmx navigation brings its data with it.
  document.addEventListener("htmx:after:settle", draw);
})();
