// bench/loadgen: k6's side of the throughput comparison (see ../README.md).
//
// One VU per connection. Each keeps WINDOW messages in flight, as wsload does: it sends
// WINDOW messages on open and one more on each echo, so the socket never idles while the
// event loop still gets to run the echo handlers (a bare `for (;;) send()` never yields to
// them). Echoes are counted in the measured window [WIN_START, WIN_END) (Unix ms, set by
// run.sh, which reads the process's CPU time at the same instants); at WIN_END each VU
// closes and prints its counts, so the run needs no end-of-test summary.
//
// API=ws (default) uses k6/ws, API=websockets the newer k6/websockets module (the former
// k6/experimental/websockets); k6/ws was about twice as fast here.
import ws from 'k6/ws';
import { WebSocket } from 'k6/websockets';
import exec from 'k6/execution';

const URL = __ENV.URL;
const SIZE = parseInt(__ENV.SIZE || '64', 10);
const WINDOW = parseInt(__ENV.WINDOW || '64', 10);
const WIN_START = parseInt(__ENV.WIN_START, 10);
const WIN_END = parseInt(__ENV.WIN_END, 10);
const API = __ENV.API || 'ws';

export const options = {
  scenarios: {
    throughput: {
      executor: 'per-vu-iterations',
      vus: parseInt(__ENV.CONNS || '100', 10),
      iterations: 1,
      maxDuration: __ENV.MAX_DURATION || '120s',
    },
  },
};

// The same frame wsload sends: a text frame of SIZE bytes.
const payload = 'x'.repeat(SIZE);

function report(counts) {
  console.log(`WSLOAD_BENCH ${JSON.stringify(counts)}`);
}

export default function () {
  const counts = { vu: exec.vu.idInTest, window: 0, all: 0, sent: 0, error: '' };
  let done = false;
  const onEcho = (send, close) => {
    counts.all++;
    const now = Date.now();
    if (now >= WIN_END) {
      if (!done) {
        done = true;
        report(counts);
        close();
      }
      return;
    }
    if (now >= WIN_START) counts.window++;
    counts.sent++;
    send();
  };
  const onOpen = (send) => {
    for (let i = 0; i < WINDOW; i++) send();
    counts.sent += WINDOW;
  };
  if (API === 'ws') {
    const res = ws.connect(URL, null, (socket) => {
      const send = () => socket.send(payload);
      const close = () => socket.close();
      socket.on('open', () => onOpen(send));
      socket.on('message', () => onEcho(send, close));
      socket.on('error', (e) => { counts.error = String(e.error()); });
    });
    if (!res || res.status !== 101) {
      counts.error = counts.error || `upgrade status ${res && res.status}`;
    }
    if (!done) report(counts);
  } else {
    const socket = new WebSocket(URL);
    const send = () => socket.send(payload);
    const close = () => socket.close();
    socket.onopen = () => onOpen(send);
    socket.onmessage = () => onEcho(send, close);
    socket.onerror = (e) => { counts.error = String(e.error); };
    socket.onclose = () => { if (!done) { done = true; report(counts); } };
  }
}
