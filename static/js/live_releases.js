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

  window.connectLive(script.dataset.wsPath, (event) => {
    if (event.type !== "pool.released") return;
    const empty = list.querySelector(".empty");
    if (empty) empty.remove();
    list.prepend(item(event));
    document.querySelectorAll('[data-pool="' + event.pool + '"] .desired').forEach((cell) => {
      cell.textContent = ref(event.version);
    });
  });
})();
