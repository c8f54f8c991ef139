// Fleet view: applies live `node.updated` events to the node rows (status, warmup progress, applied version and why
// it is not the desired one) and recounts each pool's rollout.
(function () {
  const script = document.currentScript;

  function text(cell, value) {
    if (cell) cell.textContent = value;
  }

  function ref(v) {
    return v ? v.template + " v" + v.number : "—";
  }

  function recount(section) {
    const rows = section.querySelectorAll("tr[data-node]");
    const acked = [...rows].filter((r) => r.dataset.inSync === "1").length;
    const failed = [...rows].filter((r) => r.dataset.nacked === "1" && r.dataset.inSync !== "1").length;
    const badge = section.querySelector(".rollout-state");
    if (!badge) return;
    let label = "in progress";
    if (failed) label = "failed";
    else if (rows.length && acked === rows.length) label = "complete";
    badge.className = "rollout-state badge state-" + label.replace(" ", "_");
    badge.textContent = label + " · " + acked + "/" + rows.length + " on desired" + (failed ? " · " + failed + " failed" : "");
  }

  function apply(node) {
    const section = document.querySelector('[data-rollout="' + node.pool + '"]');
    if (!section) return;
    let row = section.querySelector('tr[data-node="' + node.name + '"]');
    if (!row) {
      const empty = section.querySelector("tr.empty");
      if (empty) empty.remove();
      row = document.createElement("tr");
      row.dataset.node = node.name;
      row.innerHTML =
        '<td><a href="/nodes/' + encodeURIComponent(node.name) + '/"></a></td><td><span class="badge" data-field="status"></span></td>' +
        '<td data-field="warmup"><span class="warmup-progress" data-testid="warmup"></span></td>' +
        '<td><span data-field="applied"></span><div class="small sync-reason" data-field="sync_reason" data-testid="sync-reason"></div></td>' +
        '<td data-field="backend"></td><td data-field="engine_version" class="mono small"></td>' +
        '<td data-field="last_nack_error" class="error small"></td><td data-field="last_seen_at" class="muted small"></td>';
      row.querySelector("a").textContent = node.name;
      section.querySelector("tbody").append(row);
    }
    // Events may be partial (an ACK carries only what changed): update the fields present.
    if ("in_sync" in node) row.dataset.inSync = node.in_sync ? "1" : "0";
    if ("nacked_desired" in node) row.dataset.nacked = node.nacked_desired ? "1" : "0";
    if ("status" in node) {
      const status = row.querySelector('[data-field="status"]');
      status.className = "badge status-" + node.status;
      text(status, node.status);
    }
    if (node.warmup && window.renderWarmup) window.renderWarmup(row.querySelector('[data-testid="warmup"]'), node.warmup);
    if ("applied" in node) {
      const applied = row.querySelector('[data-field="applied"]');
      text(applied, ref(node.applied));
      applied.className = node.in_sync ? "" : "warn";
    }
    if ("sync_reason" in node) {
      // Why the node does not run the desired version yet (offline, NACKed, canary, warming up, waiting for ACK).
      const reason = row.querySelector('[data-field="sync_reason"]');
      const full = node.sync_reason || "";
      text(reason, full.length > 160 ? full.slice(0, 159) + "…" : full);
      reason.title = full;
      reason.className = "small sync-reason sync-" + (node.sync_code || "");
    }
    if ("backend" in node) {
      const backend = row.querySelector('[data-field="backend"]');
      text(backend, node.backend || "—");
      if (node.backend === "simulator") {
        const badge = document.createElement("span");
        badge.className = "badge sim";
        badge.title = "simulated engine: numbers are not measurements of vLLM";
        badge.textContent = "simulated";
        backend.append(" ", badge);
      }
    }
    if ("engine_version" in node) text(row.querySelector('[data-field="engine_version"]'), node.engine_version || "—");
    if ("last_nack_error" in node) text(row.querySelector('[data-field="last_nack_error"]'), node.last_nack_error || "");
    if ("last_seen_at" in node) text(row.querySelector('[data-field="last_seen_at"]'), (node.last_seen_at || "never").slice(0, 19));
    recount(section);
  }

  window.connectLive(script.dataset.wsPath, (event) => {
    if (event.type === "node.updated") apply(event.node);
    if (event.type === "nodes.updated") event.nodes.forEach(apply);
    if (event.type === "pool.released") location.reload();
  }, undefined, script.dataset.liveSeq);
})();
