// What every test server here shares: its options, the one line it prints when listening, and
// its GET /stats. The line is the contract with whoever started it (the integration tests in
// loadgen-image/tests/real_servers.rs, scripts/k8s/, a person following examples/):
//
//   {"server":"socketio","host":"127.0.0.1","port":40123,"stats":"/stats"}
//
// on stdout, alone, once the server accepts connections; nothing else is written to stdout.
// A server whose stats are served on a port of their own adds it as "statsPort" (nats.sh:
// nats-server's monitoring port, "stats":"/varz").
// Options: --host H (default 127.0.0.1), --port N (default 0: the kernel picks), and the
// server's own (--name value), read by option(). Everything else a server says goes to stderr.
'use strict';

const http = require('http');

/** The value of `--name` on the command line, or `fallback`. */
function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const v = process.argv[i + 1];
  if (v === undefined) {
    process.stderr.write(`--${name} needs a value\n`);
    process.exit(2);
  }
  return v;
}

/** A whole number option. */
function intOption(name, fallback) {
  const v = Number(option(name, String(fallback)));
  if (!Number.isInteger(v) || v < 0) {
    process.stderr.write(`--${name} must be a whole number\n`);
    process.exit(2);
  }
  return v;
}

/**
 * An HTTP server answering GET /stats with `stats()` (or what its promise gives) as JSON (404
 * otherwise); the WebSocket server of the caller attaches to it, so one port serves both.
 */
function statsServer(stats) {
  return http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/stats') {
      // A value, or a promise of one (a worker of a cluster asks the others).
      Promise.resolve(stats()).then((body) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      });
    } else {
      res.writeHead(404);
      res.end();
    }
  });
}

/** Listens, then prints the line above. Exits on SIGTERM/SIGINT, the stats on stderr. */
function listen(httpServer, name, stats) {
  const host = option('host', '127.0.0.1');
  const port = intOption('port', 0);
  httpServer.on('error', (e) => {
    process.stderr.write(`${name}: ${e.message}\n`);
    process.exit(1);
  });
  httpServer.listen(port, host, () => {
    const line = { server: name, host, port: httpServer.address().port, stats: '/stats' };
    process.stdout.write(`${JSON.stringify(line)}\n`);
  });
  const stop = () => {
    process.stderr.write(`${name}: ${JSON.stringify(stats())}\n`);
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

module.exports = { option, intOption, statsServer, listen };
