// The dashboard's one WebSocket helper: connects to a Channels path, shows live/reconnecting in the
// #live-state badge (or the element whose id is `stateId`), reconnects with exponential backoff (capped at 30 s),
// and hands each event over.
//
// Events to the fleet, a pool and the alerts carry `seq: {group, n}`, numbered per group by the control plane
// (controlplane/lib/event_sequence.py). A number still missing 3 s after a later one arrived (events sent by two
// processes may swap places) was dropped by a full channel or sent while this socket was away: what the page shows
// may no longer be true, so the badge says "missed N updates · reload" from then on and reloads the page on a click.
//
// `rendered` (a JSON object, group -> number, usually the script tag's data-live-seq) holds the numbers the page's
// view read before it read the state it shows: every later number is an event the page must receive. Once
// subscribed, the server says the number taken so far (`sequence.taken`); every number up to it that does not arrive
// within the grace period was sent before the socket joined (after the render, or while it was away) and is missed.
window.connectLive = function (path, onEvent, stateId, rendered) {
  const state = document.getElementById(stateId || "live-state");
  const GRACE_MS = 3000;
  const MAX_AWAITED = 100;
  const last = {}; // group -> highest number seen (or known to be taken)
  try {
    const numbers = JSON.parse(rendered || "{}");
    for (const group in numbers) if (typeof numbers[group] === "number") last[group] = numbers[group];
  } catch (e) {
    // No numbers from the page: the first one this socket hears is where it starts.
  }
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

  // `arrived`: the event numbered n is here; otherwise n is only known to be taken, its event still to come.
  function note(seq, arrived) {
    if (!seq || typeof seq.n !== "number" || typeof seq.group !== "string") return;
    const group = seq.group;
    const n = seq.n;
    const key = group + " " + n;
    if (arrived && awaited.has(key)) {
      clearTimeout(awaited.get(key));
      awaited.delete(key);
    }
    if (last[group] === undefined) {
      last[group] = n; // the first number this page hears: what came before is in the page itself
      return;
    }
    if (n <= last[group]) return; // late, or a duplicate
    const gap = n - last[group] - (arrived ? 1 : 0);
    if (gap > MAX_AWAITED) {
      lost(gap); // far behind: no need to wait for stragglers
    } else {
      for (let k = last[group] + 1; k < (arrived ? n : n + 1); k++) {
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
      if (event.type === "sequence.taken") return note(event.seq, false);
      note(event.seq, true);
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
