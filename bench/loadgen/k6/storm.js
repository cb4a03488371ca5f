// bench/loadgen: k6's side of the connection-storm comparison (see ../README.md).
//
// CONNS connections, each opened and closed again by one iteration of a shared-iterations
// executor with VUS VUs (default 50: the fastest of the 20 / 50 / 100 / 200 / 500 VUs and
// one-VU-per-connection variants measured here). MODE=vus runs CONNS VUs, one connection
// each, instead. Connect time is k6's own `ws_connecting` (dial + upgrade); the rate is
// connections / (last open - first dial start), from the Unix-ms Trends below.
import ws from 'k6/ws';
import { WebSocket } from 'k6/websockets';
import { Counter, Trend } from 'k6/metrics';

const URL = __ENV.URL;
const CONNS = parseInt(__ENV.CONNS || '5000', 10);
const API = __ENV.API || 'ws';

const dialStart = new Trend('dial_start_unix_ms');
const openedAt = new Trend('opened_unix_ms');
const opened = new Counter('opened');
const failed = new Counter('failed');

export const options = {
  scenarios: {
    storm: __ENV.MODE === 'vus'
      ? { executor: 'per-vu-iterations', vus: CONNS, iterations: 1, maxDuration: '180s' }
      : {
        executor: 'shared-iterations',
        vus: parseInt(__ENV.VUS || '50', 10),
        iterations: CONNS,
        maxDuration: '180s',
      },
  },
  summaryTrendStats: ['min', 'med', 'p(90)', 'p(95)', 'p(99)', 'p(99.9)', 'max', 'avg', 'count'],
};

export default function () {
  dialStart.add(Date.now());
  const onOpen = (close) => {
    openedAt.add(Date.now());
    opened.add(1);
    close();
  };
  if (API === 'ws') {
    const res = ws.connect(URL, null, (socket) => {
      socket.on('open', () => onOpen(() => socket.close()));
    });
    if (!res || res.status !== 101) failed.add(1);
  } else {
    const socket = new WebSocket(URL);
    socket.onopen = () => onOpen(() => socket.close());
    socket.onerror = () => failed.add(1);
  }
}

export function handleSummary(data) {
  return { [__ENV.SUMMARY]: JSON.stringify(data) };
}
