// The review queue's keyboard: a digit labels the selected message with that intent, Enter confirms the prediction,
// arrows (or j/k) move, s skips, u undoes the last label. Each label is one call to the REST API (audited there).
(function () {
  const section = document.getElementById("review");
  if (!section) return;
  const canLabel = section.dataset.canLabel === "1";
  const api = section.dataset.api;
  const csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;
  const error = document.getElementById("review-error");
  const byKey = Object.fromEntries(
    Array.from(section.querySelectorAll("[data-key]")).map((hint) => [hint.dataset.key, hint.dataset.label])
  );
  const rows = () => Array.from(section.querySelectorAll("tbody tr[data-id]"));
  const undoStack = [];
  let current = 0;

  function select(index) {
    const all = rows();
    if (!all.length) return;
    current = Math.max(0, Math.min(index, all.length - 1));
    all.forEach((row, i) => row.classList.toggle("selected", i === current));
    all[current].focus({ preventScroll: true });
    all[current].scrollIntoView({ block: "nearest" });
  }

  function nextPending(from) {
    const all = rows();
    for (let i = from; i < all.length; i++) if (!all[i].classList.contains("done")) return i;
    return from;
  }

  function count(name, delta) {
    const el = document.querySelector('[data-count="' + name + '"]');
    if (el) el.textContent = String(Number(el.textContent) + delta);
    const build = document.querySelector("[data-testid=review-dataset-form] button");
    if (build && name === "labelled") build.disabled = Number(el.textContent) === 0;
  }

  function fail(text) {
    error.textContent = text;
    error.hidden = false;
  }

  async function post(url, body) {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf, Accept: "application/json" },
      body: body === undefined ? "{}" : JSON.stringify(body),
    });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(data.error || "HTTP " + response.status);
    return data;
  }

  // Key presses are not held up by the network: the row changes at once and the calls go out one after another, in
  // the order of the presses; a refused call puts the row back and says why.
  let chain = Promise.resolve();
  function later(call) {
    chain = chain.then(call, call);
  }

  function mark(row, intent) {
    row.classList.toggle("done", intent !== null);
    row.classList.toggle("disagrees", intent !== null && intent !== row.dataset.predicted);
    row.querySelector('[data-field="label"]').textContent = intent === null ? "—" : intent;
    count("pending", intent === null ? 1 : -1);
    count("labelled", intent === null ? -1 : 1);
  }

  function label(row, intent) {
    if (!canLabel || !intent || row.classList.contains("done")) return;
    mark(row, intent);
    undoStack.push(row.dataset.id);
    select(nextPending(current + 1));
    later(async () => {
      try {
        await post(api + row.dataset.id + "/label/", { label: intent });
        error.hidden = true;
      } catch (exc) {
        mark(row, null);
        fail("Not labelled: " + exc.message);
      }
    });
  }

  function undo(id) {
    if (!canLabel || !id) return;
    const row = rows().find((r) => r.dataset.id === id);
    const was = row ? row.querySelector('[data-field="label"]').textContent : null;
    if (row) {
      mark(row, null);
      select(rows().indexOf(row));
    }
    later(async () => {
      try {
        await post(api + id + "/undo/");
        if (!row) {
          const earlier = document.querySelector('[data-undo="' + id + '"]');
          if (earlier) earlier.closest("tr").classList.add("undone");
        }
        error.hidden = true;
      } catch (exc) {
        if (row) mark(row, was);
        fail("Not undone: " + exc.message);
      }
    });
  }

  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input, select, textarea, button, form") || event.ctrlKey || event.metaKey || event.altKey) return;
    const row = rows()[current];
    if (byKey[event.key] && row) {
      label(row, byKey[event.key]);
    } else if (event.key === "Enter" && row) {
      label(row, row.dataset.predicted);
    } else if (event.key === "ArrowDown" || event.key === "j" || event.key === "s") {
      select(event.key === "s" ? nextPending(current + 1) : current + 1);
    } else if (event.key === "ArrowUp" || event.key === "k") {
      select(current - 1);
    } else if (event.key === "u") {
      undo(undoStack.pop());
    } else {
      return;
    }
    event.preventDefault();
  });
  section.addEventListener("click", (event) => {
    const row = event.target.closest("tr[data-id]");
    if (row) select(rows().indexOf(row));
  });
  document.querySelectorAll("[data-undo]").forEach((button) => {
    button.addEventListener("click", () => undo(button.dataset.undo));
  });
  select(0);
})();
