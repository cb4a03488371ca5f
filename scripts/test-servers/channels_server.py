"""Django Channels (PyPI `channels`, `django`) on Daphne, for the channels presets
(examples/channels.yaml, examples/channels-fanout.yaml): one JSON consumer at ws://HOST:PORT/ws
(AsyncJsonWebsocketConsumer), every message a JSON object by its `type`:

- `{"type":"chat","seq":N,...}` answered with `{"type":"ack","seq":N,...}` (request/response);
- `{"type":"join","group":G}`: the connection joins group G (the channel layer's group_add),
  answered with `{"type":"joined","group":G}`;
- `{"type":"publish","group":G,"seq":N,"ts":T,"data":...}`: sent to every member of G
  (group_send), each receiving `{"type":"message","group":G,"seq":N,"ts":T}`.

The channel layer is Channels' in-memory one (one process). The heartbeat is Daphne's: a
WebSocket ping to a connection that sent nothing for --ping-interval seconds (checked every
2 s), and the connection closed when its pong is --ping-timeout seconds late.

GET /stats: connections, open, pings Daphne sent, pongs answering them, ping timeouts, chats,
joined, published, delivered (messages handed to a member), unknown (messages of no known
type or not JSON).

usage: python channels_server.py [--host H] [--port N] [--ping-interval S] [--ping-timeout S]
"""

import daphne.server  # first: it installs Twisted's asyncio reactor

import django
from django.conf import settings

import serve  # this directory, first on sys.path as the script's own

NAME = "channels"

settings.configure(
    DEBUG=False,
    SECRET_KEY="wsload-test-server",
    ALLOWED_HOSTS=["*"],
    INSTALLED_APPS=["channels"],
    # Capacity: messages a consumer's channel may hold unread before group_send drops for it
    # (silently); a thousand leaves a slow consumer room to catch up, never a reason to drop.
    CHANNEL_LAYERS={
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": 1000},
        }
    },
    USE_TZ=True,
)
django.setup()

from channels.generic.websocket import AsyncJsonWebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from daphne.ws_protocol import WebSocketProtocol  # noqa: E402
from django.urls import path  # noqa: E402

stats = {
    "connections": 0,
    "open": 0,
    "pings": 0,
    "pongs": 0,
    "pingTimeouts": 0,
    "chats": 0,
    "joined": 0,
    "published": 0,
    "delivered": 0,
    "unknown": 0,
}

# Daphne's heartbeat counted where it happens: Autobahn's ping, the pong that answers it, and
# the timeout that closes a connection without one.
_send_ping = WebSocketProtocol._sendAutoPing
_ping_timeout = WebSocketProtocol.onAutoPingTimeout


def _daphne_ping(self):
    stats["pings"] += 1
    return _send_ping(self)


def _daphne_pong(self, *args):
    stats["pongs"] += 1


def _daphne_timeout(self):
    stats["pingTimeouts"] += 1
    return _ping_timeout(self)


WebSocketProtocol._sendAutoPing = _daphne_ping
WebSocketProtocol.onAutoPong = _daphne_pong
WebSocketProtocol.onAutoPingTimeout = _daphne_timeout


class Consumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        self.joined = []
        stats["connections"] += 1
        stats["open"] += 1
        await self.accept()

    async def disconnect(self, code):
        stats["open"] -= 1
        for group in self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        try:
            await super().receive(text_data, bytes_data, **kwargs)
        except ValueError:
            stats["unknown"] += 1

    async def receive_json(self, content, **kwargs):
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "chat":
            stats["chats"] += 1
            await self.send_json({**content, "type": "ack"})
        elif kind == "join":
            group = str(content.get("group"))
            await self.channel_layer.group_add(group, self.channel_name)
            self.joined.append(group)
            stats["joined"] += 1
            await self.send_json({"type": "joined", "group": group})
        elif kind == "publish":
            stats["published"] += 1
            group = str(content.get("group"))
            message = {
                "type": "message",
                "group": group,
                "seq": content.get("seq"),
                "ts": content.get("ts"),
            }
            # `group.message` is the handler each member runs: group_message below.
            await self.channel_layer.group_send(group, {"type": "group.message", "message": message})
        else:
            stats["unknown"] += 1

    async def group_message(self, event):
        stats["delivered"] += 1
        await self.send_json(event["message"])


async def http_app(scope, receive, send):
    if scope["path"] == "/stats" and scope["method"] == "GET":
        await serve.send_stats(send, stats)
    else:
        await serve.send_not_found(send)


application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": URLRouter([path("ws", Consumer.as_asgi())]),
    }
)


def main():
    p = serve.parser("Django Channels on Daphne: a JSON consumer and group broadcast")
    p.add_argument("--ping-interval", type=float, default=5)
    p.add_argument("--ping-timeout", type=float, default=5)
    args = p.parse_args()
    server = daphne.server.Server(
        application=application,
        endpoints=[f"tcp:port={args.port}:interface={args.host}"],
        ping_interval=args.ping_interval,
        ping_timeout=args.ping_timeout,
        verbosity=0,
        # Called once the endpoint listens (a TCP listen is done at once), before the reactor
        # runs: a connection made as soon as the line is read waits in the backlog.
        ready_callable=lambda: serve.announce(NAME, *server.listening_addresses[0]),
    )
    server.run()
    serve.log(NAME, str(stats))


if __name__ == "__main__":
    main()
