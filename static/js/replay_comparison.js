// Comparison page charts: each run's end-to-end latency CDF with the P99 lines, and P99 per intent grouped by run.
// Data comes from the page (json_script #comparison-charts); Plotly is served from the app.
(function () {
  const data = JSON.parse(document.getElementById("comparison-charts").textContent);
  // Plotly renders a subset of HTML in trace names (links among it): labels are people's text, so shown as text.
  const plain = (text) => String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  data.runs.forEach((run) => {
    run.label = plain(run.label);
  });
  const COLORS = ["#6b7385", "#2457d6", "#0f7b4f", "#a35b00", "#7b1fa2", "#b3261e"];
  const LINES = { warn: "#a35b00", critical: "#b3261e", target: "#7b1fa2" };
  const layoutBase = { margin: { l: 55, r: 10, t: 30, b: 40 }, legend: { orientation: "h", x: 0, y: 1.12 } };
  const config = { displayModeBar: false, responsive: true };

  // Each line's label at its own height so that 1.6 / 1.8 / 2.0 s do not print over each other.
  function verticalLine(x, color, text, dash, y) {
    return {
      shape: { type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1, line: { color, width: 1, dash } },
      note: { x, y, xref: "x", yref: "paper", text, showarrow: false, font: { size: 10, color }, xanchor: "left" },
    };
  }

  function draw() {
    const slo = data.slo;
    const lines = [verticalLine(slo.warn_s, LINES.warn, `warn ${slo.warn_s} s`, "dash", 0.3)];
    lines.push(verticalLine(slo.target_s, LINES.target, `target ${slo.target_s} s`, "dot", 0.2));
    if (slo.critical_s !== null) {
      lines.push(verticalLine(slo.critical_s, LINES.critical, `critical ${slo.critical_s} s`, "solid", 0.1));
    }
    // The x axis ends past the slowest run's P99.9 (the long tail beyond it would squeeze the rest to a line).
    const tails = data.runs.map((run) => run.p999 || 0);
    const xMax = Math.max(...tails, slo.critical_s || slo.warn_s) * 1.15;
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
        xaxis: { title: "seconds", range: [0, xMax] },
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
      x: intents.map(plain),
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
