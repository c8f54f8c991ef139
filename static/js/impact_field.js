// A parameter field's page: its value over time as a step line above the pool's P99 and throughput, drawn with the
// locally served Plotly from the data the page embeds (json_script, so no value is ever read as HTML).
(function () {
  const data = document.getElementById("field-chart-data");
  const div = document.getElementById("field-chart");
  if (!data || !div || !window.Plotly) return;
  const chart = JSON.parse(data.textContent);
  // Plotly renders a subset of HTML in hover text and category labels (links among it): reasons and values are
  // people's text, so shown as text.
  const plain = (text) => String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const stepValues = chart.numeric ? chart.steps.y : chart.steps.y.map((y) => (y === null ? y : plain(y)));
  const traces = [
    {
      name: plain(chart.path),
      x: chart.steps.x,
      y: stepValues,
      text: chart.steps.text.map(plain),
      mode: "lines+markers",
      line: { shape: "hv", color: "#1f4fa8" },
      hovertemplate: "%{y}<br>%{text}<extra></extra>",
      yaxis: "y",
    },
    { name: "P99 (s)", x: chart.p99.x, y: chart.p99.y, mode: "lines", line: { color: "#b42318" }, yaxis: "y2" },
    { name: "throughput (QPS)", x: chart.qps.x, y: chart.qps.y, mode: "lines", line: { color: "#137a4b" }, yaxis: "y3" },
  ];
  const suffix = chart.simulated ? " (simulated)" : "";
  const layout = {
    height: 520,
    margin: { t: 24, r: 16, b: 40, l: 72 },
    showlegend: true,
    legend: { orientation: "h", y: 1.06 },
    xaxis: { type: "date" },
    yaxis: { domain: [0.68, 1], title: { text: "value" }, type: chart.numeric ? "linear" : "category" },
    yaxis2: { domain: [0.35, 0.63], title: { text: "P99 s" + suffix }, rangemode: "tozero" },
    yaxis3: { domain: [0, 0.3], title: { text: "QPS" + suffix }, rangemode: "tozero" },
  };
  Plotly.newPlot(div, traces, layout, { displaylogo: false, responsive: true });
})();
