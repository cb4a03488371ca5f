// A JSON-RPC 2.0 over WebSocket server (npm `rpc-websockets`), for the jsonrpc preset
// (examples/jsonrpc.yaml): the method `sum` answers with the sum of its numbers, by the
// request's `id`; the event `tick` (subscribed with the library's `rpc.on`) is published every
// --tick-ms as a notification `{"notification":"tick","params":{...}}`. /stats: connections,
// calls answered, subscriptions, notifications delivered.
//
// usage: node jsonrpc.js [--host H] [--port N] [--tick-ms MS]
'use strict';

const { Server } = require('rpc-websockets');
const { intOption, statsServer, listen } = require('./serve');

const tickMs = intOption('tick-ms', 100);
const stats = { connections: 0, open: 0, calls: 0, subscriptions: 0, delivered: 0 };

const httpServer = statsServer(() => stats);
const rpc = new Server({ server: httpServer });

rpc.on('connection', () => {
  stats.connections++;
  stats.open++;
});
rpc.on('disconnection', () => stats.open--);
rpc.register('sum', (params) => {
  stats.calls++;
  return (Array.isArray(params) ? params : []).reduce((a, b) => a + Number(b), 0);
});
rpc.event('tick');

// rpc-websockets keeps who subscribed to an event per namespace; read for the counts only.
const subscribed = () => rpc.namespaces['/'].events.tick.sockets.length;
let n = 0;
setInterval(() => {
  n++;
  stats.subscriptions = subscribed();
  stats.delivered += stats.subscriptions;
  rpc.emit('tick', { n, ts: Date.now() });
}, tickMs);

listen(httpServer, 'jsonrpc', () => stats);
