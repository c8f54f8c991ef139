// Tuning studies, live: `tuning.progress` events redraw a study's progress card and chart (#study-progress) or its
// row in the study list (tr[data-study]). The chart (objective per trial, best so far) reads the study from the API
// when a trial has ended; Plotly is served from the app.
(function () {
  const script = document.currentScript;
  const fixed = (value, digits) => (value === null || value === undefined ? "—" : Number(value).toFixed(digits));
  const COLORS = { feasible: "#2457d6", infeasible: "#b3261e", best: "#0f7b4f" };
  let trialsDone = null;

  function set(scope, field, text) {
    const node = scope.querySelector('[data-field="' + field + '"]');
    if (node) node.textContent = text;
    return node;
  }

  function bestText(e) {
    return e.best_value === null || e.best_value === undefined ? "—" : fixed(e.best_value, 3) + " (trial " + e.best_trial + ")";
  }

  function draw(data) {
    const node = document.getElementById("study-chart");
    if (!node || !window.Plotly) return;
    const done = data.trials.filter((t) => t.state === "complete" && t.value !== null);
    const point = (feasible) => done.filter((t) => t.is_feasible === feasible);
    const minimise = data.direction === "minimize";
    const best = [];
    let sofar = null;
    data.trials.forEach((t) => {
      if (t.state === "complete" && t.is_feasible && t.value !== null) {
        if (sofar === null || (minimise ? t.value < sofar : t.value > sofar)) sofar = t.value;
      }
      best.push(sofar);
    });
    const hover = (t) => Object.entries(t.params).map(([k, v]) => k + "=" + v).join("<br>");
    const traces = [
      { name: "feasible", x: point(true).map((t) => t.number), y: point(true).map((t) => t.value), text: point(true).map(hover),
        mode: "markers", marker: { color: COLORS.feasible, size: 9 }, hovertemplate: "trial %{x}: %{y}<br>%{text}<extra></extra>" },
      { name: "misses the SLO", x: point(false).map((t) => t.number), y: point(false).map((t) => t.value), text: point(false).map(hover),
        mode: "markers", marker: { color: COLORS.infeasible, size: 9, symbol: "x" }, hovertemplate: "trial %{x}: %{y}<br>%{text}<extra></extra>" },
      { name: "best so far", x: data.trials.map((t) => t.number), y: best, mode: "lines", line: { shape: "hv", color: COLORS.best, width: 2 } },
    ];
    Plotly.react(
      node,
      traces,
      {
        margin: { l: 60, r: 10, t: 30, b: 40 },
        legend: { orientation: "h", x: 0, y: 1.15 },
        xaxis: { title: "trial", dtick: 1, rangemode: "tozero" },
        yaxis: { title: data.label || data.objective, rangemode: "tozero" },
      },
      { displayModeBar: false, responsive: true },
    );
    node.dataset.drawn = String(data.trials.length);
  }

  function refresh(studyId, base) {
    fetch("/api/v1/tuning-studies/" + studyId + "/", { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : null))
      .then((study) => {
        if (study) draw({ ...base, trials: study.trials });
      });
  }

  function onPage(e) {
    const card = document.getElementById("study-progress");
    if (!card || String(e.study_id) !== card.dataset.study) return;
    const badge = set(card, "status", e.status);
    if (badge) badge.className = "badge state-" + e.status;
    set(card, "trials_done", e.trials_done);
    set(card, "budget", e.budget);
    set(card, "best", bestText(e));
    const error = set(card, "error", e.error || "");
    if (error) error.hidden = !e.error;
    const cancel = document.getElementById("cancel-form");
    if (cancel && !["queued", "running"].includes(e.status)) cancel.hidden = true;
    if (e.trials_done !== trialsDone) {
      trialsDone = e.trials_done;
      refresh(e.study_id, JSON.parse(document.getElementById("study-chart-data").textContent));
    }
  }

  function onList(e) {
    const row = document.querySelector('tr[data-study="' + e.study_id + '"]');
    if (!row) return;
    const badge = set(row, "status", e.status);
    if (badge) badge.className = "badge state-" + e.status;
    set(row, "trials", e.trials_done + " / " + e.budget);
    set(row, "best", bestText(e));
  }

  const initial = document.getElementById("study-chart-data");
  if (initial) {
    const data = JSON.parse(initial.textContent);
    trialsDone = data.trials.filter((t) => t.state !== "running").length;
    if (window.Plotly) draw(data);
    else window.addEventListener("load", () => draw(data));
  }
  window.connectLive(script.dataset.wsPath, (e) => {
    if (e.type !== "tuning.progress") return;
    onPage(e);
    onList(e);
  });
})();
