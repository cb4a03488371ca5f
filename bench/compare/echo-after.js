// An echo server answering each message --delay-ms after it arrived (pings at once, as `ws`
// does): the "same server, 2 ms slower" of bench/compare/pairs.sh. Prints its port on stdout.
'use strict';

const { WebSocketServer } = require('ws');

const i = process.argv.indexOf('--delay-ms');
const delay = i < 0 ? 0 : Number(process.argv[i + 1]);
if (!Number.isFinite(delay) || delay < 0) {
  process.stderr.write('--delay-ms must be a number of milliseconds, 0 or more\n');
  process.exit(2);
}
const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
wss.on('connection', (ws) => {
  ws.on('message', (data, binary) => {
    if (delay === 0) ws.send(data, { binary });
    else setTimeout(() => ws.send(data, { binary }), delay);
  });
});
wss.on('listening', () => process.stdout.write(`${wss.address().port}\n`));
