// bench/loadgen: k6's side of the ping-latency comparison (see ../README.md).
//
// One VU per connection; each sends a 64 B text message, waits for its echo, records the
// round trip in the Trend `rtt`, and sends the next, PINGS times. Round trips are timed with
// exec.instance.currentTestRunDuration (a float in ms with ns resolution; Date.now() has
// only ms resolution, coarser than a loopback round trip).
import ws from 'k6/ws';
import { WebSocket } from 'k6/websockets';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';

const URL = __ENV.URL;
const PINGS = parseInt(__ENV.PINGS || '1000', 10);
const SIZE = parseInt(__ENV.SIZE || '64', 10);
const API = __ENV.API || 'ws';

const rtt = new Trend('rtt', true);
const pings = new Counter('pings');
const errors = new Counter('errors');
// Unix ms of each connection's first send and last echo: min and max give the window.
const firstSend = new Trend('ping_first_unix_ms');
const lastEcho = new Trend('ping_last_unix_ms');

export const options = {
  scenarios: {
    ping: {
      executor: 'per-vu-iterations',
      vus: parseInt(__ENV.CONNS || '1', 10),
      iterations: 1,
      maxDuration: __ENV.MAX_DURATION || '300s',
    },
  },
  summaryTrendStats: ['min', 'med', 'p(90)', 'p(95)', 'p(99)', 'p(99.9)', 'max', 'avg', 'count'],
};

const payload = 'x'.repeat(SIZE);
const clock = () => exec.instance.currentTestRunDuration;

export default function () {
  let n = 0;
  let sentAt = 0;
  const start = (send) => {
    firstSend.add(Date.now());
    sentAt = clock();
    send();
  };
  const onEcho = (send, close) => {
    rtt.add(clock() - sentAt);
    n++;
    if (n >= PINGS) {
      lastEcho.add(Date.now());
      pings.add(n);
      close();
      return;
    }
    sentAt = clock();
    send();
  };
  if (API === 'ws') {
    const res = ws.connect(URL, null, (socket) => {
      const send = () => socket.send(payload);
      const close = () => socket.close();
      socket.on('open', () => start(send));
      socket.on('message', () => onEcho(send, close));
      socket.on('error', () => errors.add(1));
    });
    if (!res || res.status !== 101) errors.add(1);
  } else {
    const socket = new WebSocket(URL);
    const send = () => socket.send(payload);
    const close = () => socket.close();
    socket.onopen = () => start(send);
    socket.onmessage = () => onEcho(send, close);
    socket.onerror = () => errors.add(1);
  }
}

export function handleSummary(data) {
  return { [__ENV.SUMMARY]: JSON.stringify(data) };
}
