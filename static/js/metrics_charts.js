// Live metric charts (overview, pool and node pages): Plotly served from the app, history from the metrics API,
// live points from the metrics WebSocket appended once a second with Plotly.extendTraces, and a "stream stalled"
// indicator when no sample arrived for more than 3 s. Config comes from the #metrics element's data attributes.
(function () {
  const STALLED_AFTER_MS = 3000;
  const TICK_MS = 1000;
  const LIVE_MAX_RANGE_S = 3600; // longer ranges are minute history, not appended to
  const COLORS = { warn: "#a35b00", bad: "#b3261e", sla: "#7b1fa2", band: "rgba(15, 123, 79, 0.13)" };
  const LENGTH_BUCKETS = [
    ["le256", "≤256"],
    ["le512", "≤512"],
    ["le1k", "≤1k"],
    ["le2k", "≤2k"],
    ["gt2k", ">2k"],
  ];

  // The classifier's confidence in ten buckets of 10 % (controlplane/metrics/samples.py CONFIDENCE_BUCKETS).
  const CONFIDENCE_BUCKETS = Array.from({ length: 10 }, (_, i) => `${i * 10}-${i * 10 + 10}`);

  const share = (bucket, map = "length_hist") => (v) => {
    const hist = v[map];
    if (!hist) return null;
    const total = Object.values(hist).reduce((a, b) => a + b, 0);
    return total > 0 ? (hist[bucket] || 0) / total : null;
  };
  const key = (name) => (v) => (v[name] === undefined ? null : v[name]);
  const line = (y, text, color, dash) => ({ y, text, color, dash });

  // Each chart: its traces (a name, the figure it reads, and what the history API is asked for) and reference lines.
  const CHARTS = [
    {
      id: "latency",
      title: "End-to-end latency",
      unit: "s",
      traces: [
        { name: "p50", get: key("latency_p50_s"), metric: "latency_p50_s" },
        { name: "p99", get: key("latency_p99_s"), metric: "latency_p99_s" },
        { name: "p999", get: key("latency_p999_s"), metric: "latency_p999_s" },
      ],
      lines: [
        line(1.6, "P99 warn 1.6 s", COLORS.warn, "dash"),
        line(1.8, "SLA: 99% ≤ 1.8 s", COLORS.sla, "dot"),
        line(2.0, "P99 critical 2.0 s", COLORS.bad, "solid"),
      ],
    },
    { id: "qps", title: "Requests per second", traces: [{ name: "QPS", get: key("qps"), metric: "qps" }] },
    {
      id: "kv",
      title: "KV-cache usage",
      percent: true,
      traces: [{ name: "KV cache", get: key("kv_cache_usage"), metric: "kv_cache_usage" }],
    },
    {
      id: "efficiency",
      title: "Batch efficiency (target 65–75 %)",
      percent: true,
      band: [0.65, 0.75],
      traces: [{ name: "efficiency", get: key("batch_efficiency"), metric: "batch_efficiency" }],
    },
    {
      id: "spec",
      title: "Speculative decoding",
      percent: true,
      traces: [
        { name: "acceptance", get: key("spec_acceptance_rate"), metric: "spec_acceptance_rate" },
        { name: "rejection", get: key("spec_rejection_rate"), metric: "spec_rejection_rate" },
      ],
      lines: [line(0.4, "rejection warn 40 %", COLORS.warn, "dash"), line(0.6, "critical 60 %", COLORS.bad, "solid")],
    },
    {
      id: "fragmentation",
      title: "Memory fragmentation",
      percent: true,
      traces: [{ name: "fragmentation", get: key("fragmentation_ratio"), metric: "fragmentation_ratio" }],
      lines: [line(0.2, "warn 20 %", COLORS.warn, "dash"), line(0.35, "critical 35 %", COLORS.bad, "solid")],
    },
    {
      // The leak case (显存泄漏): utilisation drifting down while memory used creeps up (the gpu-memory-leak rule).
      id: "gpu",
      title: "GPU",
      percent: true,
      traces: [
        { name: "utilisation (NVML)", get: key("gpu_util"), metric: "gpu_util" },
        { name: "SM activity (DCGM)", get: key("sm_util"), metric: "sm_util" },
        { name: "memory used", get: key("gpu_memory_used"), metric: "gpu_memory_used" },
      ],
    },
    {
      // The batch-timeout case: requests that waited past twice batch.timeout_ms or were refused after the queue
      // timeout, read beside the throughput chart (the batch-timeout rule fires only with a throughput drop).
      id: "batch-timeouts",
      title: "Batch timeouts",
      percent: true,
      traces: [{ name: "timed-out share", get: key("batch_timeout_rate"), metric: "batch_timeout_rate" }],
    },
    {
      id: "length",
      title: "Request length (prompt + completion tokens)",
      percent: true,
      stacked: true,
      traces: [
        ...LENGTH_BUCKETS.map(([bucket, label]) => ({ name: label, get: share(bucket), metric: "length_hist", bar: true })),
        { name: ">1k share", get: key("long_request_share"), metric: "long_request_share", emphasis: true },
      ],
      lines: [line(0.05, ">1k alert 5 %", COLORS.bad, "dash")],
    },
    {
      id: "intent",
      title: "Intent classifier confidence",
      percent: true,
      stacked: true,
      traces: [
        ...CONFIDENCE_BUCKETS.map((bucket) => ({
          name: bucket + " %",
          get: share(bucket, "intent_confidence_hist"),
          metric: "intent_confidence_hist",
          bar: true,
        })),
        {
          name: "below the floor",
          get: key("intent_below_floor_share"),
          metric: "intent_below_floor_share",
          emphasis: true,
        },
      ],
      lines: [line(0.3, "intent-unsure 30 %", COLORS.warn, "dash")],
    },
  ];

  function layout(chart, xRange) {
    const shapes = (chart.lines || []).map((l) => ({
      type: "line", xref: "paper", x0: 0, x1: 1, yref: "y", y0: l.y, y1: l.y,
      line: { color: l.color, width: 1.5, dash: l.dash },
    }));
    if (chart.band) {
      shapes.push({
        type: "rect", xref: "paper", x0: 0, x1: 1, yref: "y", y0: chart.band[0], y1: chart.band[1],
        fillcolor: COLORS.band, line: { width: 0 }, layer: "below",
      });
    }
    const annotations = (chart.lines || []).map((l) => ({
      xref: "paper", x: 1, xanchor: "right", yref: "y", y: l.y, yanchor: "bottom", text: l.text,
      showarrow: false, font: { size: 10, color: l.color },
    }));
    return {
      height: 230,
      margin: { l: 48, r: 12, t: 8, b: 28 },
      showlegend: chart.traces.length > 1,
      legend: { orientation: "h", y: 1.12, x: 0, font: { size: 11 } },
      barmode: chart.stacked ? "stack" : undefined,
      bargap: 0,
      xaxis: { type: "date", tickfont: { size: 10 }, range: xRange, autorange: false },
      yaxis: {
        rangemode: "tozero",
        tickformat: chart.percent ? ".0%" : undefined,
        ticksuffix: chart.unit ? " " + chart.unit : undefined,
        tickfont: { size: 10 },
        range: chart.percent ? [0, 1] : undefined,
      },
      shapes,
      annotations,
      font: { family: "system-ui, sans-serif" },
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "#fbfcfd",
      uirevision: "keep",
    };
  }

  // Bars are as wide as the rows they show (1 s or 60 s), not as wide as Plotly guesses from gaps in the data.
  function trace(spec, x, y, resolutionS) {
    if (spec.bar) {
      return { type: "bar", name: spec.name, x, y, opacity: 0.8, width: (resolutionS || 1) * 1000 * 0.9 };
    }
    const line = spec.emphasis ? { width: 2.4, color: "#18202f" } : { width: 1.6 };
    return { type: "scatter", mode: "lines", name: spec.name, x, y, connectgaps: false, line };
  }

  function init() {
    const root = document.getElementById("metrics");
    if (!root || !window.Plotly) return;
    const state = document.getElementById("stream-state");
    const thinnedNote = document.getElementById("stream-thinned");
    const note = document.getElementById("range-note");
    const config = { displayModeBar: false, responsive: true };
    let rangeS = 300;
    let latest = null; // newest event not yet drawn
    let lastDrawnT = null;
    let lastHeardAt = Date.now();
    let appended = 0;
    let loadSeq = 0;

    function isLive() {
      return rangeS <= LIVE_MAX_RANGE_S;
    }

    // Live ranges slide with the clock, so a stalled stream shows as a growing gap at the right edge.
    function liveWindow() {
      const now = Date.now();
      return [new Date(now - rangeS * 1000), new Date(now)];
    }

    for (const chart of CHARTS) {
      const div = document.getElementById("chart-" + chart.id);
      chart.div = div;
      Plotly.newPlot(div, chart.traces.map((spec) => trace(spec, [], [])), layout(chart, liveWindow()), config);
    }

    async function loadHistory() {
      const seq = ++loadSeq;
      const until = Date.now() / 1000;
      const metrics = [...new Set(CHARTS.flatMap((c) => c.traces.map((t) => t.metric)))];
      const url = `${root.dataset.historyUrl}?metric=${metrics.join(",")}&since=${until - rangeS}&until=${until}`;
      let body;
      try {
        const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (!response.ok) throw new Error(response.status);
        body = await response.json();
      } catch (error) {
        if (note) note.textContent = "history unavailable (" + error.message + ")";
        return;
      }
      if (seq !== loadSeq) return; // a newer range was picked meanwhile
      const x = body.t.map((t) => new Date(t * 1000));
      const rows = body.t.map((_, i) => Object.fromEntries(metrics.map((m) => [m, body.values[m][i]])));
      for (const chart of CHARTS) {
        const traces = chart.traces.map((spec) =>
          trace(spec, x.slice(), rows.map((row) => spec.get(row)), body.resolution_s),
        );
        const xRange = isLive() ? liveWindow() : [new Date(body.since * 1000), new Date(body.until * 1000)];
        Plotly.react(chart.div, traces, layout(chart, xRange), config);
      }
      lastDrawnT = body.t.length ? body.t[body.t.length - 1] : null;
      root.dataset.resolution = body.resolution_s;
      root.dataset.loadedRange = rangeS;
      if (note) {
        note.textContent = isLive()
          ? `live · ${body.t.length} points of history at ${body.resolution_s} s`
          : `history · ${body.resolution_s} s averages (minute rows), not live`;
      }
    }

    function draw() {
      if (!latest || !isLive() || latest.t === lastDrawnT || (lastDrawnT !== null && latest.t < lastDrawnT)) return;
      const x = new Date(latest.t * 1000);
      for (const chart of CHARTS) {
        const indices = chart.traces.map((_, i) => i);
        Plotly.extendTraces(
          chart.div,
          { x: chart.traces.map(() => [x]), y: chart.traces.map((spec) => [spec.get(latest.values)]) },
          indices,
          rangeS,
        );
      }
      lastDrawnT = latest.t;
      appended += 1;
      root.dataset.appended = appended;
      root.dataset.lastT = latest.t;
    }

    function showThinned(count) {
      if (!thinnedNote || !count || String(count) === thinnedNote.dataset.thinned) return;
      thinnedNote.dataset.thinned = count;
      thinnedNote.hidden = false;
      thinnedNote.textContent = `thinned ${count} sample${count === 1 ? "" : "s"} to keep up`;
    }

    function showState() {
      const silentMs = Date.now() - lastHeardAt;
      const stalled = silentMs > STALLED_AFTER_MS;
      if (!state) return;
      state.className = "stream-state " + (stalled ? "stalled" : "flowing");
      state.dataset.stalled = stalled ? "true" : "false";
      state.textContent = stalled
        ? `stream stalled: no sample for ${Math.round(silentMs / 1000)} s`
        : "live: a sample every second";
    }

    for (const button of root.querySelectorAll("[data-range]")) {
      button.addEventListener("click", () => {
        rangeS = Number(button.dataset.range);
        for (const other of root.querySelectorAll("[data-range]")) other.classList.toggle("active", other === button);
        root.dataset.range = rangeS;
        loadHistory();
      });
    }

    window.connectLive(
      root.dataset.wsPath,
      (event, socket) => {
        if (event.type !== "metrics.sample") return;
        lastHeardAt = Date.now();
        latest = event;
        // The server sends a few frames ahead of these receipts; past that it keeps only the newest sample per
        // node, pool and the fleet (a slow tab thins out instead of falling behind) and counts the rest.
        socket.send(JSON.stringify({ type: "metrics.received", seq: event.seq }));
        showThinned(event.thinned);
      },
      "metrics-socket",
    );
    setInterval(() => {
      draw();
      if (isLive()) {
        const xRange = liveWindow();
        for (const chart of CHARTS) Plotly.relayout(chart.div, { "xaxis.range": xRange });
      }
      showState();
    }, TICK_MS);
    showState();
    loadHistory();
  }

  document.addEventListener("DOMContentLoaded", init);
})();
