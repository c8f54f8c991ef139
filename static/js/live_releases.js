// Prepends pool releases to the timeline as they happen, over the control plane's WebSocket.
(function () {
  const script = document.currentScript;
  const list = document.getElementById("releases");
  const state = document.getElementById("live-state");
  if (!list || !script) return;
  const path = script.dataset.wsPath;
  let delay = 1000;

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

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + path);
    socket.onopen = () => {
      delay = 1000;
      state.textContent = "live";
      state.className = "live on";
    };
    socket.onmessage = (message) => {
      const event = JSON.parse(message.data);
      if (event.type !== "pool.released") return;
      const empty = list.querySelector(".empty");
      if (empty) empty.remove();
      list.prepend(item(event));
      document.querySelectorAll('[data-pool="' + event.pool + '"] .desired').forEach((cell) => {
        cell.textContent = ref(event.version);
      });
    };
    socket.onclose = () => {
      state.textContent = "reconnecting";
      state.className = "live off";
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
})();
