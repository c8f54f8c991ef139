// A conversation-log analysis page: its progress live over the control plane's WebSocket (and, should the socket
// miss the end, a look at the API every few seconds); once finished the page reloads with the figures, whose
// histograms are drawn here with the locally served Plotly.
(function () {
  const script = document.currentScript;
  const run = document.getElementById("run");
  if (!script || !run) return;
  const ownId = Number(run.dataset.analysisId);
  const finished = (status) => status === "succeeded" || status === "failed";

  function update(event) {
    const box = run.querySelector(".model-progress");
    box.dataset.status = event.status;
    const badge = box.querySelector(".status-badge");
    badge.textContent = event.status;
    badge.className = "badge state-" + event.status + " status-badge";
    box.querySelector(".progress").setAttribute("aria-valuenow", event.progress);
    box.querySelector(".bar").style.width = event.progress + "%";
    box.querySelector(".pct").textContent = event.progress + "%";
    box.querySelector(".progress-text").textContent = event.progress_text;
  }

  if (!finished(run.dataset.status)) {
    let reloading = false;
    const done = () => {
      if (!reloading) {
        reloading = true;
        location.reload();
      }
    };
    window.connectLive(script.dataset.wsPath, (event) => {
      if (event.type !== "log_analysis.progress" || event.analysis_id !== ownId) return;
      update(event);
      if (finished(event.status)) done();
    });
    setInterval(async () => {
      const response = await fetch(run.dataset.api, { credentials: "same-origin" });
      if (!response.ok) return;
      const state = await response.json();
      if (finished(state.status)) done();
    }, 3000);
    return;
  }

  const data = document.getElementById("analysis-charts");
  if (!data || !window.Plotly) return;
  const charts = JSON.parse(data.textContent);
  const layout = (title, xTitle, lines, bins) => ({
    title: { text: title, font: { size: 14 } },
    margin: { t: 36, r: 16, b: 48, l: 56 },
    height: 300,
    barmode: "overlay",
    xaxis: { title: { text: xTitle }, range: [0, bins.counts.length * bins.width] },
    yaxis: { title: { text: "count" } },
    showlegend: true,
    legend: { x: 1, xanchor: "right", y: 1, bgcolor: "rgba(255,255,255,0.8)" },
    shapes: lines.map((x) => ({ type: "line", x0: x, x1: x, yref: "paper", y0: 0, y1: 1, line: { dash: "dot", color: "#b42318" } })),
    annotations: lines.map((x) => ({ x: x, yref: "paper", y: 1, text: String(x), showarrow: false, font: { color: "#b42318" } })),
  });
  const bars = (bins, name, opacity) => ({
    type: "bar",
    name: name + (bins.over ? " (+" + bins.over + " longer)" : ""),
    x: bins.counts.map((_, i) => i * bins.width + bins.width / 2),
    y: bins.counts,
    width: bins.width,
    opacity: opacity,
  });
  const config = { displaylogo: false, responsive: true };
  const h = charts.histograms;
  Plotly.newPlot("chart-replies", [bars(h.replies, "all replies", 0.6), bars(h.first_turn, "first turn", 0.6)],
    layout("Reply length (tokens)", "tokens", [charts.cap, 256, 512].filter((v, i, all) => all.indexOf(v) === i), h.replies), config);
  Plotly.newPlot("chart-prompts", [bars(h.prompts, "prompts", 0.8)],
    layout("Prompt length (tokens)", "tokens", [charts.long_context_threshold], h.prompts), config);
  Plotly.newPlot("chart-turns", [bars(h.turns, "conversations", 0.8)], layout("Turns per conversation", "user turns", [], h.turns), config);
})();
