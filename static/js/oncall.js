// On-call page: applies live `alerts.changed` events (new, changed and resolved incidents, pending alerts),
// ticks every duration once a second, and shows a browser notification when an incident fires or escalates.
(function () {
  const script = document.currentScript;
  const incidents = document.getElementById("incidents");
  const noIncidents = document.getElementById("no-incidents");
  const pending = document.getElementById("pending");
  const resolved = document.getElementById("resolved");
  const template = document.getElementById("incident-template");

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function field(root, name) {
    return root.querySelector('[data-field="' + name + '"]');
  }

  function duration(since) {
    const seconds = Math.max(0, Math.floor((Date.now() - Date.parse(since)) / 1000));
    if (seconds < 60) return seconds + " s";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min " + (seconds % 60) + " s";
    return Math.floor(minutes / 60) + " h " + (minutes % 60) + " min";
  }

  function tick() {
    document.querySelectorAll("[data-since]").forEach((node) => {
      if (node.dataset.since) node.textContent = duration(node.dataset.since);
    });
  }

  function badge(severity) {
    return el("span", "badge sev-" + severity, severity);
  }

  function fill(card, incident) {
    card.dataset.incident = incident.id;
    card.setAttribute("data-testid", "incident-" + incident.rule);
    card.className = "incident card sev-" + incident.severity;
    const severity = field(card, "severity");
    severity.className = "badge sev-" + incident.severity;
    severity.textContent = incident.severity;
    field(card, "pool").textContent = incident.pool || "the fleet";
    card.querySelector("b.mono").textContent = incident.rule;
    field(card, "duration").dataset.since = incident.opened_at;
    field(card, "silenced").hidden = !incident.is_silenced;
    field(card, "acked").hidden = !incident.acknowledged_by;
    field(card, "summary").textContent = incident.summary;
    field(card, "condition").textContent = incident.condition;
    const runbook = field(card, "runbook");
    runbook.href = incident.runbook_url;
    runbook.textContent = "Runbook: " + incident.runbook;
    field(card, "affected-count").textContent = incident.affected_count;
    const list = field(card, "affected");
    list.replaceChildren();
    incident.affected.forEach((a) => {
      const item = el("li");
      item.dataset.alert = a.alert;
      item.append(el("span", "mono", a.name), " ", badge(a.severity), " " + a.value_text);
      if (a.is_stale) item.append(" ", el("span", "muted", "(no fresh data)"));
      if (a.is_silenced) item.append(" ", el("span", "muted", "(silenced)"));
      if (a.state === "resolved") item.append(" ", el("span", "muted", "(resolved)"));
      list.append(item);
    });
    const ack = field(card, "ack-text");
    ack.replaceChildren();
    if (incident.acknowledged_by) {
      ack.append("Acknowledged by ", el("b", "", incident.acknowledged_by));
      if (incident.acknowledgement_note) ack.append(": " + incident.acknowledgement_note);
    }
    const ackForm = card.querySelector("form.ack-form");
    // The attribute, not the `action` property: a card cloned from the <template> is not in the page yet.
    if (ackForm) {
      const action = ackForm.getAttribute("action").replace(/\/incidents\/\d+\/ack\/$/, "/incidents/" + incident.id + "/ack/");
      ackForm.setAttribute("action", action);
    }
    const rollback = field(card, "rollback");
    if (rollback) {
      if (incident.pool) {
        rollback.href = "/pools/" + encodeURIComponent(incident.pool) + "/rollback/";
        rollback.textContent = "Roll back " + incident.pool + "…";
      } else rollback.remove();
    }
    const degrade = card.querySelector("form.degrade-form");
    if (degrade) {
      if (incident.pool) {
        degrade.setAttribute("action", "/pools/" + encodeURIComponent(incident.pool) + "/degradation/");
        const button = field(degrade, "degrade");
        button.textContent = "Degrade " + incident.pool;
        button.dataset.confirm = "Degrade " + incident.pool + " now (temperature and max_tokens capped)?";
      } else degrade.remove();
    }
    const cleanup = card.querySelector("form.cleanup-form");
    if (cleanup) {
      if (incident.pool) {
        cleanup.setAttribute("action", "/pools/" + encodeURIComponent(incident.pool) + "/cleanup/");
        const button = field(cleanup, "cleanup");
        button.textContent = "Clean up " + incident.pool;
        button.dataset.confirm = "Clean up GPU memory on every node of " + incident.pool + ", one node at a time?";
      } else cleanup.remove();
    }
  }

  function prefillSilence(card, incident) {
    const form = card.querySelector("form.silence-form");
    if (!form) return;
    form.elements.rule.value = incident.rule;
    form.elements.pool.value = incident.pool;
    form.elements.node.value = incident.affected_count === 1 ? incident.affected[0].node : "";
  }

  function upsertIncident(incident) {
    let card = incidents.querySelector('[data-incident="' + incident.id + '"]');
    if (incident.state !== "firing") {
      if (card) card.remove();
      addResolved(incident);
      noIncidents.hidden = incidents.children.length > 0;
      return;
    }
    if (!card) {
      card = template.content.firstElementChild.cloneNode(true);
      fill(card, incident);
      prefillSilence(card, incident);
      incidents.prepend(card);
    } else fill(card, incident);
    noIncidents.hidden = true;
  }

  function addResolved(incident) {
    if (resolved.querySelector('[data-incident="' + incident.id + '"]')) return;
    const row = el("tr");
    row.dataset.incident = incident.id;
    const severity = el("td");
    severity.append(badge(incident.severity));
    row.append(
      el("td", "mono", incident.rule),
      el("td", "", incident.pool || "—"),
      severity,
      el("td", "", (incident.opened_at || "").slice(0, 19)),
      el("td", "", (incident.resolved_at || "").slice(0, 19)),
      el("td", "", String(incident.affected_count)),
      el("td", "", incident.acknowledged_by || "—"),
    );
    resolved.prepend(row);
  }

  function upsertPending(alert) {
    let row = pending.querySelector('tr[data-alert="' + alert.id + '"]');
    if (alert.state !== "pending") {
      if (row) row.remove();
      return;
    }
    if (!row) {
      row = el("tr");
      row.dataset.alert = alert.id;
      const on = el("td", "", alert.name);
      if (alert.pool && alert.scope === "node") on.append(" ", el("span", "muted small", "(" + alert.pool + ")"));
      const since = el("td");
      since.dataset.field = "holding";
      const waiting = el("td", "small waiting-for");
      waiting.dataset.field = "waiting";
      row.append(el("td", "mono", alert.rule), on, el("td"), el("td"), since, el("td", "", alert.for_s + " s"), waiting);
      row.children[2].dataset.field = "value";
      pending.prepend(row);
    }
    row.children[2].textContent = alert.value_text;
    row.children[3].replaceChildren(badge(alert.severity));
    // How long the condition has held (the `for` counts from there), unknown while no fresh data comes in.
    const holding = field(row, "holding");
    holding.dataset.since = alert.holding_since || "";
    if (!alert.holding_since) holding.textContent = "unknown (no fresh data)";
    field(row, "waiting").textContent = alert.waiting_for || "";
  }

  function notify(incident, escalated) {
    if (!("Notification" in window) || Notification.permission !== "granted") return;
    const where = incident.pool || "the fleet";
    const title = (escalated ? "Escalated: " : "") + incident.severity.toUpperCase() + " " + incident.rule + " in " + where;
    const body = incident.summary + " (" + incident.affected_count + " affected)";
    new Notification(title, { body: body, tag: "incident-" + incident.id });
  }

  const seenSeverity = {};
  incidents.querySelectorAll("[data-incident]").forEach((card) => {
    seenSeverity[card.dataset.incident] = field(card, "severity").textContent.trim();
  });

  window.connectLive(script.dataset.wsPath, (event) => {
    if (event.type !== "alerts.changed") return;
    if (event.evaluator) {
      // Whether evaluation passes complete: when they do not, that is what every pending alert waits for.
      const state = document.querySelector("[data-testid=evaluator-state]");
      if (state) {
        state.hidden = event.evaluator.is_running;
        state.textContent = event.evaluator.text;
      }
    }
    event.alerts.forEach(upsertPending);
    const byId = {};
    event.incidents.forEach((incident) => {
      byId[incident.id] = incident;
      upsertIncident(incident);
    });
    event.notify.forEach((id) => {
      const incident = byId[id];
      if (incident) notify(incident, id in seenSeverity);
    });
    event.incidents.forEach((incident) => {
      seenSeverity[incident.id] = incident.severity;
    });
    tick();
  }, undefined, script.dataset.liveSeq);

  const button = document.getElementById("notify-enable");
  const state = document.getElementById("notify-state");
  function showPermission() {
    if (!("Notification" in window)) {
      state.textContent = "this browser has no notifications";
      button.disabled = true;
      return;
    }
    state.textContent = "browser notifications: " + Notification.permission;
    button.hidden = Notification.permission === "granted";
  }
  button.addEventListener("click", () => {
    if ("Notification" in window) Notification.requestPermission().then(showPermission);
  });
  showPermission();
  tick();
  setInterval(tick, 1000);
})();
