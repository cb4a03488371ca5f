// A GraphQL over WebSocket server (npm `graphql-ws` on `ws`, subprotocol
// graphql-transport-ws), for the graphql-ws preset (examples/graphql-ws.yaml). The
// subscription `ticks` yields --events events, one every --every-ms, to every subscriber at
// once, starting --delay-ms after the --subscribers-th subscription (so that every subscriber
// of a test gets every event), then completes. The server also pings each connection every
// --ping-ms with the protocol's own `{"type":"ping"}` (a client must answer `pong`; graphql-ws
// answers a client's ping itself). /stats: subscribers, events started, `next` messages
// delivered, pongs received.
//
// usage: node graphql-ws.js [--host H] [--port N] [--subscribers N] [--events N]
//                           [--every-ms MS] [--delay-ms MS] [--ping-ms MS]
'use strict';

const { WebSocketServer } = require('ws');
const { useServer } = require('graphql-ws/use/ws');
const { buildSchema } = require('graphql');
const { intOption, statsServer, listen } = require('./serve');

const want = intOption('subscribers', 1);
const events = intOption('events', 20);
const everyMs = intOption('every-ms', 100);
const delayMs = intOption('delay-ms', 1000);
const pingMs = intOption('ping-ms', 2000);

const stats = {
  connections: 0,
  open: 0,
  subscribers: 0, // subscriptions ever started
  eventsPerSubscription: events,
  started: false, // whether the events began (the --subscribers-th subscription came)
  delivered: 0, // `next` messages sent, over all subscribers
  completed: 0,
  pings: 0,
  pongs: 0,
};

const schema = buildSchema(`
  type Tick { n: Int!, ts: Float! }
  type Query { hello: String }
  type Subscription { ticks: Tick! }
`);

// Resolved with the time of the first event once the wanted subscribers are there.
let startAt;
const start = new Promise((resolve) => {
  startAt = resolve;
});
const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

async function* ticks() {
  stats.subscribers++;
  if (stats.subscribers === want) {
    stats.started = true;
    startAt(Date.now() + delayMs);
  }
  const t0 = await start;
  // Every subscriber's nth event is due at the same instant: one schedule, not drift per
  // subscriber.
  for (let n = 1; n <= events; n++) {
    await sleep(t0 + (n - 1) * everyMs - Date.now());
    yield { ticks: { n, ts: Date.now() } };
  }
  stats.completed++;
}

const roots = { subscription: { ticks } };
const httpServer = statsServer(() => stats);
const wss = new WebSocketServer({ server: httpServer, path: '/graphql' });

wss.on('connection', (socket) => {
  stats.connections++;
  stats.open++;
  socket.on('message', (data) => {
    // Parsed again here only to count the answers to our pings; graphql-ws itself ignores pongs.
    if (String(data) === '{"type":"pong"}') stats.pongs++;
  });
  const timer = setInterval(() => {
    stats.pings++;
    socket.send('{"type":"ping"}');
  }, pingMs);
  socket.on('close', () => {
    stats.open--;
    clearInterval(timer);
  });
});

useServer(
  {
    schema,
    roots,
    connectionInitWaitTimeout: 3000,
    onNext: () => {
      stats.delivered++;
    },
  },
  wss,
);

listen(httpServer, 'graphql-ws', () => stats);
