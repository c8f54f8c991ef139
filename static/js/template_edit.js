// Template editor: validates the document against the server's schema as you type (nothing is saved).
(function () {
  const form = document.getElementById("editor-form");
  if (!form) return;
  const textarea = document.getElementById("document");
  const format = document.getElementById("format");
  const list = document.getElementById("errors");
  const validity = document.getElementById("validity");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  let timer = null;
  let seq = 0;

  function badge(apply) {
    if (!apply) return "";
    const title = apply === "hot" ? "hot: applied per request at the gateway, no restart" : "cold: needs a drained restart of vLLM";
    return ' <span class="badge ' + apply + '" title="' + title + '">' + apply + "</span>";
  }

  function escapeHtml(text) {
    const div = document.createElement("div");
    div.textContent = text;
    return div.innerHTML;
  }

  function render(errors) {
    list.innerHTML = errors
      .map((e) => '<li><span class="mono">' + escapeHtml(e.path) + "</span>: " + escapeHtml(e.message) + badge(e.apply) + "</li>")
      .join("");
    validity.textContent = errors.length ? errors.length + (errors.length === 1 ? " error" : " errors") : "valid";
    validity.className = "validity " + (errors.length ? "bad" : "good");
  }

  async function validate() {
    const mine = ++seq;
    try {
      const response = await fetch(form.dataset.validateUrl, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
        body: JSON.stringify({ text: textarea.value, format: format.value }),
        credentials: "same-origin",
      });
      const body = await response.json();
      if (mine !== seq) return;
      if (response.ok) render(body.errors);
      else render([{ path: "(request)", message: body.error || "validation failed" }]);
    } catch (err) {
      validity.textContent = "cannot reach the server to validate";
      validity.className = "validity bad";
    }
  }

  function schedule() {
    clearTimeout(timer);
    validity.textContent = "checking…";
    validity.className = "validity";
    timer = setTimeout(validate, 300);
  }

  textarea.addEventListener("input", schedule);
  format.addEventListener("change", schedule);
  textarea.addEventListener("keydown", (event) => {
    if (event.key === "Tab") {
      event.preventDefault();
      const start = textarea.selectionStart;
      textarea.setRangeText("  ", start, textarea.selectionEnd, "end");
      schedule();
    }
  });
})();
