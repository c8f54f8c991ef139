// A node's warmup run as a progress bar (state, done/total, p50/p99, concurrency); the same markup as
// templates/nodes/_warmup_progress.html, redrawn from the `warmup` of a `node.updated` event.
(function () {
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function shown(value) {
    return value === null || value === undefined || value === "" ? "—" : String(value);
  }

  window.renderWarmup = function (container, w) {
    if (!container || !w) return;
    container.dataset.state = w.state || "idle";
    container.replaceChildren();
    const badge = el("span", "badge state-" + (w.state || "idle"), w.state || "idle");
    badge.dataset.field = "warmup-state";
    container.append(badge);
    if (["running", "passed", "failed"].includes(w.state)) {
      const pct = w.total ? Math.round((100 * (w.done || 0)) / w.total) : 0;
      const bar = el("span", "progress");
      bar.setAttribute("role", "progressbar");
      bar.setAttribute("aria-valuemin", "0");
      bar.setAttribute("aria-valuemax", "100");
      bar.setAttribute("aria-valuenow", String(pct));
      const fill = el("span", "bar");
      fill.style.width = pct + "%";
      bar.append(fill);
      const figures = el(
        "span",
        "small mono",
        (w.done || 0) + "/" + (w.total || 0) + " · p50 " + shown(w.p50) + " s · p99 " + shown(w.p99) +
          " s · concurrency " + shown(w.concurrency) + "/" + shown(w.max_concurrency),
      );
      figures.dataset.field = "warmup-figures";
      container.append(" ", bar, " ", figures);
    }
    if (w.reason) {
      const reason = el("span", "muted small", (w.trigger || "") + ": " + w.reason);
      reason.dataset.field = "warmup-reason";
      container.append(" ", reason);
    }
  };
})();
