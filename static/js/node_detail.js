// Node page: follows the node's commands (progress, result, a cleanup's before/after figures), its status and its
// warmup run live, from the pool's `node.command_changed` and `node.updated` events.
(function () {
  const script = document.currentScript;
  const node = script.dataset.node;
  const body = document.getElementById("commands");

  function field(row, name) {
    return row.querySelector('[data-field="' + name + '"]');
  }

  function command(c) {
    if (c.node !== node || !body) return;
    let row = body.querySelector('tr[data-command="' + c.id + '"]');
    if (!row) {
      const empty = body.querySelector("tr.empty");
      if (empty) empty.remove();
      row = document.createElement("tr");
      row.dataset.command = c.id;
      row.innerHTML =
        "<td></td><td></td><td></td>" +
        '<td><span class="badge" data-field="state"></span> <span class="muted small" data-field="progress"></span></td>' +
        '<td class="small" data-field="result"></td>';
      const cells = row.querySelectorAll("td");
      cells[0].textContent = (c.requested_at || "").slice(11, 19);
      cells[1].textContent = c.op_display;
      cells[2].textContent = c.requested_by;
      body.prepend(row);
    }
    const state = field(row, "state");
    state.className = "badge state-" + c.state;
    state.textContent = c.state;
    // A command not started yet says what it waits for (the pool's cleanup lease, the node to reconnect...).
    field(row, "progress").textContent = c.waiting_for || c.progress || "";
    field(row, "result").textContent = c.figures ? c.figures.text : c.result || "";
  }

  function status(n) {
    if (n.name !== node) return;
    if (n.warmup && window.renderWarmup) {
      window.renderWarmup(document.querySelector("[data-testid=warmup-cell] [data-testid=warmup]"), n.warmup);
    }
    if ("sync_reason" in n) {
      const reason = document.querySelector("[data-testid=sync-reason]");
      if (reason) {
        reason.textContent = n.sync_reason || "";
        reason.className = "small sync-reason sync-" + (n.sync_code || "");
      }
      const inSync = document.querySelector("[data-testid=in-sync]");
      if (inSync && "in_sync" in n) {
        const badge = document.createElement("span");
        badge.className = n.in_sync ? "ok" : "warn";
        badge.textContent = n.in_sync ? "in sync" : "not applied";
        inSync.replaceChildren(badge);
      }
    }
    if (!("status" in n)) return;
    const badge = document.querySelector("[data-testid=node-status]");
    if (!badge) return;
    badge.className = "badge status-" + n.status;
    badge.textContent = n.status;
  }

  window.connectLive(script.dataset.wsPath, (event) => {
    if (event.type === "node.command_changed") command(event.command);
    if (event.type === "node.updated") status(event.node);
    if (event.type === "nodes.updated") event.nodes.forEach(status);
  }, undefined, script.dataset.liveSeq);
})();
