// Prepends pool releases to the timeline as they happen, over the control plane's WebSocket.
(function () {
  const script = document.currentScript;
  const list = document.getElementById("releases");
  if (!list || !script) return;

  function ref(v) {
    return v ? v.template + " v" + v.number : "none";
  }

  function item(event) {
    const li = document.createElement("li");
    li.className = "fresh";
    const kind = document.createElement("span");
    kind.className = "badge " + event.kind;
    kind.textContent = event.kind;
    const what = document.createElement("b");
    what.textContent = " " + event.pool + " → " + ref(event.version);
    const who = document.createElement("span");
    who.className = "muted";
    who.textContent = " by " + event.actor + " (was " + ref(event.previous_version) + ")";
    const reason = document.createElement("div");
    reason.className = "reason";
    reason.textContent = event.reason;
    li.append(kind, what, who, reason);
    return li;
  }

  // A canary's progress on the pool page: state, stage, window left, each node's ACK and the latest analysis.
  function rollout(r) {
    const set = (id, text) => document.querySelectorAll('[data-testid="' + id + '"]').forEach((el) => (el.textContent = text));
    set("canary-state", r.state);
    set("canary-stage", String(r.stage_index + 1));
    set("canary-window", r.window_left_s === null ? (r.is_active ? "waiting for ACKs" : "-") : Math.round(r.window_left_s) + " s");
    // One list item per stage entered, one badge per node, as the server renders them.
    document.querySelectorAll('[data-testid="canary-stages"]').forEach((ol) => {
      ol.replaceChildren(...r.stage_nodes.map((s) => {
        const li = document.createElement("li");
        s.nodes.forEach((n) => {
          const badge = document.createElement("span");
          badge.className = "badge" + (n.acked ? " ok" : n.nacked ? " error" : "");
          badge.textContent = n.name + " " + (n.acked ? "ACK" : n.nacked ? "NACK" : "pending");
          li.append(badge, " ");
        });
        return li;
      }));
    });
    const a = r.latest_analysis;
    set("canary-analysis", a ? "Latest analysis: " + a.verdict + (a.canary ? " · canary P99 " + Number(a.canary.latency_p99_s).toFixed(3) + " s vs baseline " + Number(a.baseline.latency_p99_s).toFixed(3) + " s" : "") + (a.reasons || []).map((x) => " · " + x).join("") : "No analysis yet.");
    if (r.outcome) set("canary-outcome", r.outcome);
  }

  window.connectLive(script.dataset.wsPath, (event) => {
    if (event.type === "rollout.updated") return rollout(event.rollout);
    if (event.type !== "pool.released") return;
    const empty = list.querySelector(".empty");
    if (empty) empty.remove();
    list.prepend(item(event));
    document.querySelectorAll('[data-pool="' + event.pool + '"] .desired').forEach((cell) => {
      cell.textContent = ref(event.version);
    });
  }, undefined, script.dataset.liveSeq);
})();
