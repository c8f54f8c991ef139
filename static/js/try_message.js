// "Try a message" on a template version: asks the control plane what a gateway would decide, and why.
(function () {
  const form = document.getElementById("explain-form");
  if (!form) return;
  const table = document.getElementById("explain-result");
  const body = table.querySelector("tbody");
  const error = document.getElementById("explain-error");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;

  function cell(text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    return td;
  }

  function row(name, value, rule) {
    const tr = document.createElement("tr");
    tr.dataset.value = name;
    tr.append(cell(name, "mono"), cell(value, "mono value"), cell(rule || ""));
    body.append(tr);
  }

  function show(result) {
    const d = result.decision;
    body.replaceChildren();
    const intent = d.intent === null ? "none" : d.intent + (d.confidence === null ? "" : " (" + d.confidence.toFixed(3) + ")");
    row("intent", intent, d.intent_source === "business_tag" ? "business tag" : d.intent_source);
    const hits = d.regex_hits.map((h) => h.match).join(", ");
    row("regex hits", hits || "none", d.regex_hits.length ? d.regex_hits.length + " strict pattern(s)" : "");
    row("tier", d.tier, d.tier_rule + ": " + d.tier_detail);
    row("temperature", String(d.temperature), d.temperature_rule);
    row("max_tokens", String(d.max_tokens), d.max_tokens_rule + (d.notes.length ? " (" + d.notes.join("; ") + ")" : ""));
    row("continuation rounds", String(d.continuation_rounds), d.continuation_rounds ? "a reply cut mid-sentence is continued" : "none");
    row("streamed past", d.stream_after_tokens === null ? "never" : d.stream_after_tokens + " tokens", d.stream_after_tokens === null ? "max_tokens is at or below max_tokens.streaming_threshold: the reply comes whole" : "a client that accepts JSON or a stream gets a longer reply streamed");
    row("queue", d.queue, d.queue_rule);
    if (d.override) row("override", d.override.tier || String(d.override.temperature), "set by " + d.override.set_by + ": " + d.override.reason);
    if (d.degraded) row("degraded", "yes", "the pool is degraded: its temperature and max_tokens win");
    row("decided in", result.decision_us + " µs", "template " + result.template + (result.pool ? ", pool " + result.pool : ""));
    table.hidden = false;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const payload = { message: data.get("message") };
    for (const key of ["pool", "business_tag", "conversation_id"]) {
      if (data.get(key)) payload[key] = data.get(key);
    }
    if (data.get("max_tokens")) payload.max_tokens = Number(data.get("max_tokens"));
    const granted = (data.get("granted_tags") || "").split(",").map((tag) => tag.trim()).filter(Boolean);
    if (granted.length) payload.granted_tags = granted;
    error.hidden = true;
    const response = await fetch(form.dataset.url, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify(payload),
      credentials: "same-origin",
    });
    const result = await response.json();
    if (!response.ok) {
      error.textContent = result.error || "the explain request failed";
      error.hidden = false;
      table.hidden = true;
      return;
    }
    show(result);
  });
})();
