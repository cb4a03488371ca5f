// A SockJS server as applications run it (npm `sockjs`, the server of the sockjs-client
// browser library), for the sockjs preset (examples/sockjs.yaml). Its framing is SockJS' own,
// over a plain WebSocket at /chat/<server>/<session>/websocket: the server opens with `o`,
// sends a heartbeat `h` after --heartbeat-ms without sending anything else (so a busy
// connection sees none), and sends messages as `a["...", ...]`, a JSON
// array of strings (as many as it has pending); a client sends `["...", ...]` the same way.
// The application: a message {"type":"join"} joins the broadcast; {"type":"chat","seq":N,...}
// is answered with the same object, "type" set to "ack"; every --tick-ms (0: never) each
// member gets {"type":"tick","seq":K,"ts":MS} (MS: a float, the millisecond of the tick).
// /stats: connections, joined, chats answered, ticks delivered (sockjs gives no hook to count
// its heartbeats).
//
// usage: node sockjs.js [--host H] [--port N] [--heartbeat-ms MS] [--tick-ms MS]
'use strict';

const sockjs = require('sockjs');
const { intOption, statsServer, listen } = require('./serve');

const heartbeatMs = intOption('heartbeat-ms', 5000);
const tickMs = intOption('tick-ms', 100);

const stats = {
  connections: 0, // ever opened
  open: 0,
  joined: 0,
  chats: 0, // chats answered
  ticks: 0, // tick messages delivered (one per member)
  unreadable: 0, // messages that were not the application's JSON
};

const members = new Set();
const server = sockjs.createServer({
  heartbeat_delay: heartbeatMs,
  disconnect_delay: 5000,
  log: () => {},
});
server.on('connection', (conn) => {
  stats.connections++;
  stats.open++;
  conn.on('data', (text) => {
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      stats.unreadable++;
      return;
    }
    if (msg.type === 'join') {
      members.add(conn);
      stats.joined++;
    } else if (msg.type === 'chat') {
      stats.chats++;
      conn.write(JSON.stringify({ ...msg, type: 'ack' }));
    } else {
      stats.unreadable++;
    }
  });
  conn.on('close', () => {
    stats.open--;
    members.delete(conn);
  });
});

let seq = 0;
if (tickMs > 0) {
  setInterval(() => {
    seq++;
    const text = JSON.stringify({ type: 'tick', seq, ts: performance.timeOrigin + performance.now() });
    for (const conn of members) conn.write(text);
    stats.ticks += members.size;
  }, tickMs);
}

const httpServer = statsServer(() => stats);
server.installHandlers(httpServer, { prefix: '/chat' });
listen(httpServer, 'sockjs', () => stats);
