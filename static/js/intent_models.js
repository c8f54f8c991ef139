// Live intent model training: moves every progress bar on the page as events arrive over the control plane's
// WebSocket, and on a model's own page swaps in its evaluation and publish form once training ends (no reload).
(function () {
  const script = document.currentScript;
  if (!script) return;
  const own = document.querySelector("[data-this-model]");
  const ownId = own ? Number(own.dataset.thisModel) : null;
  let swapped = false;

  function update(event) {
    document.querySelectorAll('.model-progress[data-model-id="' + event.model_id + '"]').forEach((el) => {
      el.dataset.status = event.status;
      const badge = el.querySelector(".status-badge");
      if (badge) {
        badge.textContent = event.status;
        badge.className = "badge state-" + event.status + " status-badge";
      }
      const meter = el.querySelector(".progress");
      if (meter) meter.setAttribute("aria-valuenow", event.progress);
      const bar = el.querySelector(".bar");
      if (bar) bar.style.width = event.progress + "%";
      const pct = el.querySelector(".pct");
      if (pct) pct.textContent = event.progress + "%";
      const text = el.querySelector(".progress-text");
      if (text) text.textContent = event.progress_text;
    });
    if (event.accuracy !== null) {
      document.querySelectorAll('[data-model-accuracy="' + event.model_id + '"]').forEach((cell) => {
        cell.textContent = event.accuracy.toFixed(4);
      });
    }
  }

  // The server renders the evaluation; fetch this page again and take its finished sections.
  async function showResults() {
    if (swapped) return;
    swapped = true;
    const response = await fetch(location.href, { credentials: "same-origin" });
    if (!response.ok) {
      swapped = false;
      return;
    }
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    ["training", "evaluation", "publish"].forEach((id) => {
      const now = document.getElementById(id);
      const next = fresh.getElementById(id);
      if (now && next) {
        now.replaceWith(next);
      }
    });
  }

  function finished(status) {
    return status === "succeeded" || status === "failed";
  }

  window.connectLive(script.dataset.wsPath, (event) => {
    if (event.type !== "intent_model.progress") return;
    update(event);
    if (event.model_id === ownId && finished(event.status)) showResults();
  });

  // Training may have ended between rendering this page and the socket opening: look once more shortly after.
  if (own) {
    const status = own.querySelector(".model-progress");
    if (status && !finished(status.dataset.status)) {
      setTimeout(async () => {
        const response = await fetch(location.href, { credentials: "same-origin" });
        if (!response.ok) return;
        const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
        const state = fresh.querySelector("[data-this-model] .model-progress");
        if (state && finished(state.dataset.status)) showResults();
      }, 2000);
    }
  }
})();
