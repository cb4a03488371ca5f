// An MQTT broker as applications run it (npm `aedes`, over WebSocket with `ws` the way its
// documentation shows), for the mqtt preset (examples/mqtt.yaml), which was written against
// another broker (mochi-mqtt) and runs here as shipped. Every WebSocket connection is an MQTT
// connection (MQTT 3.1.1 and 5, QoS 0-2, retained messages, keep-alive enforced: a client
// silent for 1.5 x its keep-alive is dropped). aedes writes each packet through a stream, so
// one packet may come in several WebSocket frames (a CONNACK as four one-byte frames): what
// the preset's `split: {packets: ...}` is for. /stats: clients connected and disconnected,
// PUBLISHes received from clients by QoS, the deliveries those owe by the broker's
// subscription table (`routed`: the subscribers of the PUBLISH's topic, exact topic names
// only, no wildcards), SUBSCRIBEs, PINGREQs, client errors (and by their message).
//
// usage: node mqtt.js [--host H] [--port N]
'use strict';

const { pathToFileURL } = require('url');
const { WebSocketServer, createWebSocketStream } = require('ws');
const { statsServer, listen } = require('./serve');

const stats = {
  clients: 0, // CONNECTs accepted
  disconnected: 0,
  published: { 0: 0, 1: 0, 2: 0 }, // PUBLISHes from clients, by QoS
  routed: 0, // deliveries those PUBLISHes owe: their topic's subscribers when published
  subscriptions: 0, // topics subscribed to, over all SUBSCRIBEs
  pings: 0, // PINGREQs
  errors: 0, // client errors (a malformed packet ends its connection)
  errorKinds: {}, // errors by message, so a test tells a malformed packet from a reset
};

async function main() {
  // aedes is an ES module; import() does not search NODE_PATH (run.sh's node_modules), so
  // the path comes from require's resolution, which does.
  const { Aedes } = await import(pathToFileURL(require.resolve('aedes')).href);
  const broker = await Aedes.createBroker();
  // topic -> the ids of the clients subscribed to it (clean sessions: gone at disconnect).
  const subscribers = new Map();
  const unsubscribe = (topic, id) => {
    const set = subscribers.get(topic);
    if (set && set.delete(id) && set.size === 0) subscribers.delete(topic);
  };
  broker.on('client', () => stats.clients++);
  broker.on('clientDisconnect', (client) => {
    stats.disconnected++;
    for (const topic of [...subscribers.keys()]) unsubscribe(topic, client.id);
  });
  broker.on('subscribe', (subs, client) => {
    for (const { topic } of subs) {
      stats.subscriptions++;
      if (!subscribers.has(topic)) subscribers.set(topic, new Set());
      subscribers.get(topic).add(client.id);
    }
  });
  broker.on('unsubscribe', (topics, client) => topics.forEach((t) => unsubscribe(t, client.id)));
  broker.on('clientError', (client, err) => {
    stats.errors++;
    const kind = (err && (err.code || err.message)) || 'unknown';
    stats.errorKinds[kind] = (stats.errorKinds[kind] || 0) + 1;
  });
  broker.on('ping', () => stats.pings++);
  broker.on('publish', (packet, client) => {
    // The broker's own $SYS messages have no client.
    if (!client) return;
    stats.published[packet.qos]++;
    stats.routed += (subscribers.get(packet.topic) || new Set()).size;
  });
  const httpServer = statsServer(() => stats);
  const wss = new WebSocketServer({ server: httpServer });
  wss.on('connection', (websocket, req) => broker.handle(createWebSocketStream(websocket), req));
  listen(httpServer, 'mqtt', () => stats);
}

main().catch((e) => {
  process.stderr.write(`mqtt: ${e.stack || e}\n`);
  process.exit(1);
});
