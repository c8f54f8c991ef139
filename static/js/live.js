// The dashboard's one WebSocket helper: connects to a Channels path, shows live/reconnecting in the
// #live-state badge (or the element whose id is `stateId`), reconnects with exponential backoff (capped at 30 s),
// and hands each event over.
window.connectLive = function (path, onEvent, stateId) {
  const state = document.getElementById(stateId || "live-state");
  let delay = 1000;

  function show(text, className) {
    if (!state) return;
    state.textContent = text;
    state.className = "live " + className;
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + path);
    socket.onopen = () => {
      delay = 1000;
      show("live", "on");
    };
    socket.onmessage = (message) => onEvent(JSON.parse(message.data), socket);
    socket.onclose = () => {
      show("reconnecting", "off");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
};
