// A Socket.IO 4 server as applications run it (npm `socket.io`), for the socketio preset
// (examples/socketio.yaml) and the fanout one (examples/socketio-fanout.yaml): heartbeat every
// 5 s, 3 s to answer it; a client that emits "join" joins the room it names (acknowledged with
// the room's name when the emit asks for an ack); every room gets a "tick" every --tick-ms
// (0: never); "chat" is acknowledged with what it carried; "publish" with an object carrying
// `room` is broadcast to that room's members as "publish" with the object unchanged (the
// publisher's `seq` and `ts` included). /stats counts Engine.IO and Socket.IO connections
// apart (a client that never joins the namespace is an Engine.IO connection only), and
// publishes and their deliveries (room members at each publish, summed).
//
// usage: node socketio.js [--host H] [--port N] [--tick-ms MS]
'use strict';

const { Server } = require('socket.io');
const { intOption, statsServer, listen } = require('./serve');

const tickMs = intOption('tick-ms', 100);
const stats = {
  engineio: 0, // Engine.IO connections ever opened
  engineioOpen: 0,
  socketio: 0, // Socket.IO (namespace "/") connections ever made
  socketioOpen: 0,
  joined: 0,
  chats: 0,
  published: 0, // "publish" events broadcast
  delivered: 0, // their deliveries: the room's members at each publish, summed
  ticks: 0, // tick messages delivered (one per socket in the room)
  disconnects: {}, // reason -> count
};

const httpServer = statsServer(() => stats);
const io = new Server(httpServer, {
  pingInterval: 5000,
  pingTimeout: 3000,
  serveClient: false,
});

io.engine.on('connection', (socket) => {
  stats.engineio++;
  stats.engineioOpen++;
  socket.on('close', () => stats.engineioOpen--);
});

const rooms = new Set();
io.on('connection', (socket) => {
  stats.socketio++;
  stats.socketioOpen++;
  socket.on('join', (room, ack) => {
    const name = String(room);
    socket.join(name);
    rooms.add(name);
    stats.joined++;
    if (typeof ack === 'function') ack(name);
  });
  socket.on('publish', (msg) => {
    if (!msg || typeof msg !== 'object') return;
    const members = io.of('/').adapter.rooms.get(String(msg.room));
    stats.published++;
    stats.delivered += members ? members.size : 0;
    io.to(String(msg.room)).emit('publish', msg);
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
    const members = io.of('/').adapter.rooms.get(room);
    if (!members || members.size === 0) continue;
    stats.ticks += members.size;
    io.to(room).emit('tick', { room, n, ts: Date.now() });
  }
};
if (tickMs > 0) setInterval(tick, tickMs);

listen(httpServer, 'socketio', () => stats);
