// Comparison page charts: each run's end-to-end latency CDF with the P99 lines, and P99 per intent grouped by run.
// Data comes from the page (json_script #comparison-charts); Plotly is served from the app.
(function () {
  const data = JSON.parse(document.getElementById("comparison-charts").textContent);
  const COLORS = ["#6b7385", "#2457d6", "#0f7b4f", "#a35b00", "#7b1fa2", "#b3261e"];
  const LINES = { warn: "#a35b00", critical: "#b3261e", target: "#7b1fa2" };
  const layoutBase = { margin: { l: 50, r: 10, t: 10, b: 40 }, height: 300, legend: { orientation: "h", y: -0.25 } };
  const config = { displayModeBar: false, responsive: true };

  function verticalLine(x, color, text, dash) {
    return {
      shape: { type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1, line: { color, width: 1, dash } },
      note: { x, y: 1, xref: "x", yref: "paper", text, showarrow: false, font: { size: 10, color }, yanchor: "bottom" },
    };
  }

  function draw() {
    const slo = data.slo;
    const lines = [verticalLine(slo.warn_s, LINES.warn, `warn ${slo.warn_s} s`, "dash")];
    lines.push(verticalLine(slo.target_s, LINES.target, `target ${slo.target_s} s`, "dot"));
    if (slo.critical_s !== null) lines.push(verticalLine(slo.critical_s, LINES.critical, `critical ${slo.critical_s} s`, "solid"));
    const cdf = data.runs.map((run, i) => ({
      x: run.cdf.x,
      y: run.cdf.y,
      name: run.label,
      mode: "lines",
      line: { shape: "hv", color: COLORS[i % COLORS.length], width: 2 },
    }));
    Plotly.newPlot(
      "chart-cdf",
      cdf,
      {
        ...layoutBase,
        xaxis: { title: "seconds", rangemode: "tozero" },
        yaxis: { title: "share of requests", range: [0, 1.02], tickformat: ".0%" },
        shapes: lines.map((l) => l.shape),
        annotations: lines.map((l) => l.note),
      },
      config,
    );
    const intents = [...new Set(data.runs.flatMap((run) => Object.keys(run.intents)))].sort();
    const bars = data.runs.map((run, i) => ({
      type: "bar",
      name: run.label,
      x: intents,
      y: intents.map((name) => (run.intents[name] ? run.intents[name].p99 : null)),
      marker: { color: COLORS[i % COLORS.length] },
    }));
    Plotly.newPlot(
      "chart-intents",
      bars,
      {
        ...layoutBase,
        barmode: "group",
        yaxis: { title: "P99 seconds", rangemode: "tozero" },
        shapes: [
          { type: "line", xref: "paper", x0: 0, x1: 1, y0: slo.warn_s, y1: slo.warn_s, line: { color: LINES.warn, dash: "dash", width: 1 } },
        ],
      },
      config,
    );
    document.getElementById("chart-cdf").dataset.drawn = "1";
    document.getElementById("chart-intents").dataset.drawn = "1";
  }

  if (window.Plotly) draw();
  else window.addEventListener("load", draw);
})();
