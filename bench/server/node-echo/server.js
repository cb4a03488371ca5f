'use strict';
// Minimal `ws` echo server: the Node.js peer in the wsload-server benchmark.
// One process (one event loop); the benchmark notes this next to its numbers.
const { WebSocketServer } = require('ws');

const args = process.argv.slice(2);
const i = args.indexOf('--listen');
const listen = i >= 0 && args[i + 1] ? args[i + 1] : '127.0.0.1:8080';
const sep = listen.lastIndexOf(':');
const host = listen.slice(0, sep);
const port = Number(listen.slice(sep + 1));

// No permessage-deflate and no payload copy beyond what ws does: same work as the other servers.
const wss = new WebSocketServer({ host, port, perMessageDeflate: false, clientTracking: false });
wss.on('connection', (ws) => {
  ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
  ws.on('error', () => {});
});
wss.on('listening', () => console.error(`node-echo listening on ${host}:${port}`));
