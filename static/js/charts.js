// Charts of the assistant's list and query results: each drawn from the cells of the table
// beside it (its text alternative, always there), with the vendored Chart.js, loaded the first
// time a chart is needed. The server decides which results chart (monark/assistant/result_view).
(() => {
  const COLOURS = ["#3b6fd8", "#e08a2c", "#3aa57a", "#b0479e"];
  let loading = null;

  function library() {
    if (window.Chart) return Promise.resolve(window.Chart);
    if (!loading) {
      loading = new Promise((resolve, reject) => {
        const tag = document.createElement("script");
        tag.src = document.body.dataset.chartLibrary;
        tag.onload = () => resolve(window.Chart);
        tag.onerror = () => { loading = null; reject(new Error("Chart.js did not load")); };
        document.head.appendChild(tag);
      });
    }
    return loading;
  }

  function figures(holder) {
    const table = holder.closest(".result-table")?.querySelector("table");
    if (!table) return null;
    const heads = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
    const rows = [...table.querySelectorAll("tbody tr")].map((tr) =>
      [...tr.children].map((td) => td.textContent.trim()));
    const labelAt = Number(holder.dataset.labelColumn);
    const series = holder.dataset.series.split(",").map(Number);
    return {
      labels: rows.map((row) => row[labelAt]),
      datasets: series.map((at, i) => ({
        label: heads[at],
        data: rows.map((row) => Number(row[at])),
        backgroundColor: COLOURS[i % COLOURS.length],
        borderColor: COLOURS[i % COLOURS.length],
      })),
    };
  }

  function drawAll(root) {
    const holders = [...(root || document).querySelectorAll?.(".result-chart:not([data-drawn])") || []];
    if (!holders.length) return;
    library().then((Chart) => {
      holders.forEach((holder) => {
        const canvas = holder.querySelector("canvas");
        const data = figures(holder);
        if (!canvas || !data || holder.dataset.drawn || !canvas.isConnected) return;
        holder.dataset.drawn = "1";
        new Chart(canvas, {
          type: holder.dataset.chart,
          data,
          options: {
            animation: false, responsive: true, maintainAspectRatio: false,
            plugins: {legend: {display: data.datasets.length > 1}},
            scales: {y: {beginAtZero: true}},
          },
        });
      });
    }).catch(() => { /* the table beside it has the same figures */ });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", () => drawAll(document));
  } else {
    drawAll(document);
  }
  document.addEventListener("htmx:after:settle", () => drawAll(document));
  document.addEventListener("htmx:sse:after:message", () => drawAll(document));
})();
