"""What the Python test servers here share with the node ones (serve.js is the contract): the
options --host and --port, the one line printed on stdout once the server accepts connections,

    {"server":"ariadne","host":"127.0.0.1","port":40123,"stats":"/stats"}

and GET /stats, the server's own counters as JSON. Everything else goes to stderr.

uvicorn is handed a socket made here (listening_socket), so that --port 0 (the kernel picks) is
known before the line is printed; Daphne reports the port it listens on itself.
"""

import argparse
import json
import socket
import sys


def parser(description):
    """An argument parser with the shared --host and --port."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    return p


def listening_socket(host, port):
    """A TCP socket bound to HOST:PORT and listening, with a backlog for a thousand clients
    connecting at once."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(4096)
    sock.setblocking(False)
    return sock


def announce(name, host, port):
    """The contract's line, alone on stdout."""
    line = {"server": name, "host": host, "port": port, "stats": "/stats"}
    sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
    sys.stdout.flush()


async def send_stats(send, stats):
    """Answers an ASGI HTTP request with STATS as JSON."""
    body = json.dumps(stats).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_not_found(send):
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def log(name, message):
    sys.stderr.write(f"{name}: {message}\n")
    sys.stderr.flush()
