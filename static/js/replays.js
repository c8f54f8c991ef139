// Replay runs, live: `replay.progress` events redraw a run's progress on its page (#replay-progress) or its row
// in the run list (tr[data-run]).
(function () {
  const script = document.currentScript;
  const fixed = (value, digits) => (value === null || value === undefined ? "—" : Number(value).toFixed(digits));

  function set(scope, field, text) {
    const node = scope.querySelector('[data-field="' + field + '"]');
    if (node) node.textContent = text;
    return node;
  }

  function onPage(e) {
    const card = document.getElementById("replay-progress");
    if (!card || String(e.run_id) !== card.dataset.run) return;
    const badge = set(card, "status", e.status);
    if (badge) badge.className = "badge state-" + e.status;
    set(card, "sent", e.sent);
    set(card, "planned", e.planned);
    set(card, "done", e.done);
    set(card, "errors", e.errors);
    set(card, "achieved_qps", fixed(e.achieved_qps, 2));
    set(card, "asked_qps", fixed(e.asked_qps, 2));
    set(card, "p99_s", fixed(e.p99_s, 3));
    const error = set(card, "error", e.error || "");
    if (error) error.hidden = !e.error;
    const cancel = document.getElementById("cancel-form");
    if (cancel && !["queued", "running"].includes(e.status)) cancel.hidden = true;
  }

  function onList(e) {
    const row = document.querySelector('tr[data-run="' + e.run_id + '"]');
    if (!row) return;
    const badge = set(row, "status", e.status);
    if (badge) badge.className = "badge state-" + e.status;
    set(row, "sent", e.sent + " / " + e.planned);
    set(row, "errors", e.errors);
    set(row, "qps", fixed(e.achieved_qps, 2) + " / " + fixed(e.asked_qps, 2));
    set(row, "p99", e.p99_s === null || e.p99_s === undefined ? "—" : fixed(e.p99_s, 3) + " s");
  }

  window.connectLive(script.dataset.wsPath, (e) => {
    if (e.type !== "replay.progress") return;
    onPage(e);
    onList(e);
  });
})();
