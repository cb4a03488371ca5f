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
// With --workers N (N > 1) it runs as Socket.IO applications scale past one process: Node's
// cluster module, N worker processes sharing the port, rooms spanning them through
// @socket.io/cluster-adapter (each worker its own open-file limit, so N times the sockets).
// Clients must connect with the WebSocket transport only (no sticky sessions for polling).
// Each worker's ticks then go to its own members of a room (`io.local`), and /stats, answered
// by whichever worker takes the request, sums every worker's; `delivered` is null there, as a
// worker sees only its own members of a room.
//
// With --recovery-ms MS (MS > 0) it turns on Socket.IO's connection-state recovery: every event
// broadcast to a room carries its offset as its last argument, and a client back within MS
// of its drop that sends `40{"pid":...,"offset":...}` is given its rooms again and every event
// of them it missed since that offset (`recovered` counts those sockets).
//
// usage: node socketio.js [--host H] [--port N] [--tick-ms MS] [--workers N] [--recovery-ms MS]
'use strict';

const cluster = require('cluster');
const { Server } = require('socket.io');
const { option, intOption, statsServer, listen } = require('./serve');

const tickMs = intOption('tick-ms', 100);
const workers = intOption('workers', 1);
const recoveryMs = intOption('recovery-ms', 0);
if (workers > 1 && cluster.isPrimary) {
  primary();
  return;
}
const clustered = workers > 1;
// A worker's: every worker's stats summed, through the primary.
let allStats;
const stats = {
  engineio: 0, // Engine.IO connections ever opened
  engineioOpen: 0,
  socketio: 0, // Socket.IO (namespace "/") connections ever made
  socketioOpen: 0,
  joined: 0,
  recovered: 0, // sockets given their rooms and missed events again (--recovery-ms)
  chats: 0,
  published: 0, // "publish" events broadcast
  delivered: 0, // their deliveries: the room's members at each publish, summed
  ticks: 0, // tick messages delivered (one per socket in the room)
  disconnects: {}, // reason -> count
};

const httpServer = statsServer(() => (clustered ? allStats() : stats));
const io = new Server(httpServer, {
  pingInterval: 5000,
  pingTimeout: 3000,
  serveClient: false,
  ...(recoveryMs > 0
    ? { connectionStateRecovery: { maxDisconnectionDuration: recoveryMs, skipMiddlewares: true } }
    : {}),
  ...(clustered ? { adapter: require('@socket.io/cluster-adapter').createAdapter() } : {}),
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
  if (socket.recovered) stats.recovered++;
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
    if (!clustered) stats.delivered += members ? members.size : 0;
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
    (clustered ? io.local : io).to(room).emit('tick', { room, n, ts: Date.now() });
  }
};
if (tickMs > 0) setInterval(tick, tickMs);

if (clustered) {
  workerListen();
} else {
  listen(httpServer, 'socketio', () => stats);
}

/** The primary: forks the workers, says the one line once all listen, sums their stats. */
function primary() {
  require('@socket.io/cluster-adapter').setupPrimary();
  const pending = new Map(); // stats request id -> { worker, replies, stats }
  let listening = 0;
  let announced = false;
  const ask = (id, worker) => {
    pending.set(id, { worker, replies: 0, stats: {} });
    for (const w of Object.values(cluster.workers)) w.send({ statsQuery: id });
  };
  cluster.on('message', (worker, msg) => {
    if (msg.listening !== undefined && !announced && ++listening === workers) {
      announced = true;
      process.stdout.write(`${JSON.stringify({ server: 'socketio', ...msg.listening, stats: '/stats' })}\n`);
    } else if (msg.statsRequest !== undefined) {
      ask(msg.statsRequest, worker);
    } else if (msg.statsReply !== undefined) {
      const p = pending.get(msg.statsReply);
      if (!p) return;
      sum(p.stats, msg.stats);
      if (++p.replies < workers) return;
      pending.delete(msg.statsReply);
      if (p.worker) p.worker.send({ statsAnswer: msg.statsReply, stats: p.stats });
      else p.done(p.stats);
    }
  });
  cluster.on('exit', (w, code, signal) => {
    if (stopping) return;
    process.stderr.write(`socketio: worker ${w.process.pid} exited (${signal || code}); stopping\n`);
    process.exit(1);
  });
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    const id = 'final';
    ask(id, null);
    const quit = (stats) => {
      process.stderr.write(`socketio: ${JSON.stringify(stats)}\n`);
      for (const w of Object.values(cluster.workers)) w.process.kill('SIGKILL');
      process.exit(0);
    };
    pending.get(id).done = quit;
    setTimeout(() => quit(pending.get(id)?.stats ?? {}), 2000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  for (let i = 0; i < workers; i++) cluster.fork();
}

/** Adds `b`'s counts into `a` (numbers, and objects of numbers such as `disconnects`). */
function add(a, b) {
  for (const [k, v] of Object.entries(b)) {
    if (typeof v === 'number') a[k] = (a[k] || 0) + v;
    else if (v && typeof v === 'object') add((a[k] = a[k] || {}), v);
  }
}

/** A worker's stats into the cluster's. */
function sum(all, one) {
  add(all, one);
  all.delivered = null;
  all.workers = workers;
}

/** A worker: listens on the shared port, answers the primary's stats queries. */
function workerListen() {
  const answers = new Map();
  process.on('message', (msg) => {
    if (msg.statsQuery !== undefined) {
      process.send({ statsReply: msg.statsQuery, stats: { ...stats, delivered: 0 } });
    } else if (msg.statsAnswer !== undefined) {
      const done = answers.get(msg.statsAnswer);
      answers.delete(msg.statsAnswer);
      if (done) done(msg.stats);
    }
  });
  let next = 0;
  allStats = () =>
    new Promise((done) => {
      const id = `${process.pid}-${next++}`;
      answers.set(id, done);
      process.send({ statsRequest: id });
    });
  // The primary stops the workers (a signal to the process group reaches them too, and the
  // primary still wants their last stats); a worker whose primary is gone ends.
  process.on('SIGINT', () => {});
  process.on('SIGTERM', () => {});
  process.on('disconnect', () => process.exit(0));
  const host = option('host', '127.0.0.1');
  httpServer.listen(intOption('port', 0), host, () => {
    process.send({ listening: { host, port: httpServer.address().port } });
  });
}
