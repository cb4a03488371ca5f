// A Socket.IO 2 server on Engine.IO 3 (npm `socket.io@2`, installed as `socket.io-v2` beside
// socket.io 4), for the socketio2 preset (examples/socketio2.yaml). Engine.IO 3 turns the
// heartbeat around: the CLIENT pings ("2") every pingInterval and the server answers ("3"); a
// connection from which nothing has come for pingInterval + pingTimeout is closed ("ping
// timeout"; any packet from the client restarts that clock, not only a ping). The server
// connects every client to the namespace "/" itself ("40" after the open packet): a client
// that sends "40" as a Socket.IO 4 client does gets a second socket on "/".
//
// The application is socketio.js': "join" joins the room it names (acknowledged with the
// room's name when the emit asks for an ack); every room gets a "tick" every --tick-ms (0:
// never); "chat" is acknowledged with what it carried. /stats counts Engine.IO and Socket.IO
// connections apart, joins, chats, ticks (one per member a tick reached), the client pings
// answered (in all, and the fewest any one connection sent), and disconnects by reason.
//
// usage: node socketio2.js [--host H] [--port N] [--tick-ms MS] [--ping-interval-ms MS]
//                          [--ping-timeout-ms MS]
//   --ping-interval-ms  how often the client is told to ping (default 5000; Socket.IO 2's own
//                       default, 25000, would leave a minute's test two or three heartbeats)
//   --ping-timeout-ms   the grace after it (default 10000: wsload's heartbeat starts its
//                       schedule again when the measured phase begins, so one gap between a
//                       connection's pings may reach twice the interval)
'use strict';

const io = require('socket.io-v2');
const { intOption, statsServer, listen } = require('./serve');

const tickMs = intOption('tick-ms', 100);
const stats = {
  engineio: 0, // Engine.IO connections ever opened
  engineioOpen: 0,
  socketio: 0, // Socket.IO (namespace "/") connections ever made
  socketioOpen: 0,
  joined: 0,
  chats: 0,
  ticks: 0, // tick messages sent (one per socket in the room)
  pings: 0, // client pings ("2") answered with "3"
  pingsMin: null, // the fewest pings any Engine.IO connection sent (null: none yet)
  disconnects: {}, // reason -> count
};
// Pings per Engine.IO connection: the open ones', and the fewest of those closed.
const pingsOf = new Map();
let closedMin = null;
const least = (a, b) => (a === null ? b : Math.min(a, b));
const current = () => {
  let min = closedMin;
  for (const n of pingsOf.values()) min = least(min, n);
  stats.pingsMin = min;
  return stats;
};

const httpServer = statsServer(current);
const server = io(httpServer, {
  pingInterval: intOption('ping-interval-ms', 5000),
  pingTimeout: intOption('ping-timeout-ms', 10000),
  serveClient: false,
});

server.engine.on('connection', (socket) => {
  stats.engineio++;
  stats.engineioOpen++;
  pingsOf.set(socket, 0);
  // Engine.IO 3 emits "heartbeat" on each client ping, once it has sent the pong.
  socket.on('heartbeat', () => {
    stats.pings++;
    pingsOf.set(socket, pingsOf.get(socket) + 1);
  });
  socket.on('close', () => {
    stats.engineioOpen--;
    closedMin = least(closedMin, pingsOf.get(socket));
    pingsOf.delete(socket);
  });
});

// Room name -> its members' count is the adapter's: Socket.IO 2 keeps rooms as plain objects.
const rooms = new Set();
const members = (room) => {
  const r = server.of('/').adapter.rooms[room];
  return r ? r.length : 0;
};

server.on('connection', (socket) => {
  stats.socketio++;
  stats.socketioOpen++;
  socket.on('join', (room, ack) => {
    const name = String(room);
    socket.join(name);
    rooms.add(name);
    stats.joined++;
    if (typeof ack === 'function') ack(name);
  });
  socket.on('chat', (msg, ack) => {
    stats.chats++;
    if (typeof ack === 'function') ack(msg);
  });
  socket.on('disconnect', (reason) => {
    stats.socketioOpen--;
    stats.disconnects[reason] = (stats.disconnects[reason] || 0) + 1;
  });
});

let n = 0;
const tick = () => {
  n++;
  for (const room of rooms) {
    const count = members(room);
    if (count === 0) continue;
    stats.ticks += count;
    server.to(room).emit('tick', { room, n, ts: Date.now() });
  }
};
if (tickMs > 0) setInterval(tick, tickMs);

listen(httpServer, 'socketio2', current);
