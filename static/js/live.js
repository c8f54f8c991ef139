// The dashboard's one WebSocket helper: connects to a Channels path, shows live/reconnecting in the
// #live-state badge (or the element whose id is `stateId`), reconnects with exponential backoff (capped at 30 s),
// and hands each event over.
//
// Events to the fleet, a pool and the alerts carry `seq: {group, n}`, numbered per group by the control plane
// (controlplane/lib/event_sequence.py). A number still missing 3 s after a later one arrived (events sent by two
// processes may swap places) was dropped by a full channel or sent while this socket was away: what the page shows
// may no longer be true, so the badge says "missed N updates · reload" from then on and reloads the page on a click.
window.connectLive = function (path, onEvent, stateId) {
  const state = document.getElementById(stateId || "live-state");
  const GRACE_MS = 3000;
  const MAX_AWAITED = 100;
  const last = {}; // group -> highest number seen
  const awaited = new Map(); // "group n" -> timer
  let delay = 1000;
  let missed = 0;
  let open = false;

  function show(text, className) {
    if (!state) return;
    if (missed && open) {
      text = "missed " + missed + " update" + (missed === 1 ? "" : "s") + " · reload";
      className = "missed";
      state.title = "Live updates were lost (a busy server or a dropped connection). Reload to see the current state.";
      state.setAttribute("role", "button");
      state.onclick = () => location.reload();
    }
    state.textContent = text;
    state.className = "live " + className;
  }

  function lost(count) {
    missed += count;
    if (open) show("live", "on"); // while reconnecting the badge says so; the count shows once open again
  }

  function note(seq) {
    if (!seq || typeof seq.n !== "number" || typeof seq.group !== "string") return;
    const group = seq.group;
    const n = seq.n;
    const key = group + " " + n;
    if (awaited.has(key)) {
      clearTimeout(awaited.get(key));
      awaited.delete(key);
    }
    if (last[group] === undefined) {
      last[group] = n; // the first numbered event on this page: what came before is in the page itself
      return;
    }
    if (n <= last[group]) return; // late, or a duplicate
    const gap = n - last[group] - 1;
    if (gap > MAX_AWAITED) {
      lost(gap); // far behind: no need to wait for stragglers
    } else {
      for (let k = last[group] + 1; k < n; k++) {
        const missing = group + " " + k;
        awaited.set(missing, setTimeout(() => {
          awaited.delete(missing);
          lost(1);
        }, GRACE_MS));
      }
    }
    last[group] = n;
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + path);
    socket.onopen = () => {
      delay = 1000;
      open = true;
      show("live", "on");
    };
    socket.onmessage = (message) => {
      const event = JSON.parse(message.data);
      note(event.seq);
      onEvent(event, socket);
    };
    socket.onclose = () => {
      open = false;
      show("reconnecting", "off");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
};
