"""Ariadne GraphQL (PyPI `ariadne`) served by uvicorn, on both of GraphQL's WebSocket
subprotocols at ws://HOST:PORT/graphql, for the ariadne presets (examples/ariadne*.yaml):

- `graphql-transport-ws` (Ariadne's GraphQLTransportWSHandler): `connection_init`,
  `subscribe`, `next`, `complete`; a client's `ping` answered with a bare `{"type":"pong"}`.
- `graphql-ws`, the older subscriptions-transport-ws protocol (GraphQLWSHandler):
  `connection_init`, `start`, `data`; a `ka` keep-alive every --keepalive-ms.

Ariadne's GraphQL ASGI app takes one WebSocket handler, so there are two apps over one schema
and the upgrade goes to the one whose subprotocol the client offers. Every connection also gets
uvicorn's WebSocket ping every --ping-ms (no pong within --ping-timeout-ms: closed, 1011).

The schema: `query { echo(seq) }` answers its seq (request/response); `mutation { publish(topic,
seq, ts, data) }` hands an event to every subscriber of `subscription { ticks(topic) }` (an
in-process pub/sub), which first yields seq 0 (the subscription is in place: the client's
acknowledgement, neither protocol having one) and then each event as published, its seq and
its publish instant (ts, a Float: microseconds as the publisher wrote them).

GET /stats: connections by subprotocol, open, uvicorn's WebSocket pings and the pongs answering
them, keep-alive timeouts, `ka` messages, protocol pings (each answered with a bare pong),
echoes, publishes, subscriptions, deliveries (events handed to a subscriber's `next`/`data`),
acloseErrors (Ariadne's graphql-ws handler failing to close a subscription on disconnect).

usage: python ariadne_server.py [--host H] [--port N] [--ping-ms MS] [--ping-timeout-ms MS]
                         [--keepalive-ms MS]
"""

import asyncio
import collections
from datetime import timedelta

import uvicorn
from ariadne import (
    MutationType,
    QueryType,
    SubscriptionType,
    make_executable_schema,
)
from ariadne.asgi import GraphQL
from ariadne.asgi.handlers import (
    GraphQLTransportWSHandler,
    GraphQLWSHandler,
)
from starlette.websockets import WebSocketDisconnect, WebSocketState
from uvicorn.protocols.websockets.websockets_sansio_impl import (
    WebSocketsSansIOProtocol,
)

import serve  # this directory, first on sys.path as the script's own

NAME = "ariadne"

stats = {
    "connections": {"graphql-transport-ws": 0, "graphql-ws": 0},
    "open": 0,
    "pings": 0,  # WebSocket pings uvicorn sent
    "pongs": 0,  # WebSocket pongs answering the ping in flight
    "pingTimeouts": 0,  # connections closed for a ping unanswered in time
    "keepAlives": 0,  # graphql-ws `ka` messages sent
    "protocolPings": 0,  # graphql-transport-ws `ping` messages, each answered by a pong
    "echoes": 0,
    "published": 0,
    "subscriptions": 0,
    "delivered": 0,
    "acloseErrors": 0,  # see CountingGraphQLWS
}

# uvicorn's keep-alive counted where it happens: its protocol's ping and pong handling.
_send_ping = WebSocketsSansIOProtocol.send_keepalive_ping
_handle_pong = WebSocketsSansIOProtocol.handle_pong
_ping_timeout = WebSocketsSansIOProtocol.keepalive_timeout


def _uvicorn_ping(self):
    _send_ping(self)
    if self.pending_ping_payload is not None:
        stats["pings"] += 1


def _uvicorn_pong(self, event):
    if self.pending_ping_payload is not None and bytes(event.data) == self.pending_ping_payload:
        stats["pongs"] += 1
    _handle_pong(self, event)


def _uvicorn_timeout(self):
    stats["pingTimeouts"] += 1
    _ping_timeout(self)


WebSocketsSansIOProtocol.send_keepalive_ping = _uvicorn_ping
WebSocketsSansIOProtocol.handle_pong = _uvicorn_pong
WebSocketsSansIOProtocol.keepalive_timeout = _uvicorn_timeout

type_defs = """
    type Query { echo(seq: Int!): Int! }
    type Mutation { publish(topic: String!, seq: Int!, ts: Float!, data: String): Int! }
    type Tick { topic: String!, seq: Int!, ts: Float! }
    type Subscription { ticks(topic: String!): Tick! }
"""
query = QueryType()
mutation = MutationType()
subscription = SubscriptionType()
# topic -> the queues of its subscriptions
subscribers = collections.defaultdict(set)


@query.field("echo")
def resolve_echo(_, info, seq):
    stats["echoes"] += 1
    return seq


@mutation.field("publish")
def resolve_publish(_, info, topic, seq, ts, data=None):
    stats["published"] += 1
    event = {"topic": topic, "seq": seq, "ts": ts}
    for q in subscribers[topic]:
        q.put_nowait(event)
    return len(subscribers[topic])


@subscription.source("ticks")
async def ticks_source(_, info, topic):
    q = asyncio.Queue()
    subscribers[topic].add(q)
    stats["subscriptions"] += 1
    websocket = info.context["request"]
    try:
        yield {"topic": topic, "seq": 0, "ts": 0.0}
        while True:
            try:
                event = await asyncio.wait_for(q.get(), 5)
            except asyncio.TimeoutError:
                # Ariadne's graphql-ws handler cannot close this generator when its client
                # goes (see CountingGraphQLWS): it ends itself, and leaves the topic.
                if WebSocketState.DISCONNECTED in (
                    websocket.client_state,
                    websocket.application_state,
                ):
                    return
                continue
            yield event
    finally:
        subscribers[topic].discard(q)


@subscription.field("ticks")
def resolve_ticks(event, info, topic):
    if event["seq"] > 0:
        stats["delivered"] += 1
    return event


class CountingTransportWS(GraphQLTransportWSHandler):
    async def handle_websocket_ping_message(self, websocket, client_context):
        stats["protocolPings"] += 1
        await super().handle_websocket_ping_message(websocket, client_context)


class CountingGraphQLWS(GraphQLWSHandler):
    # On disconnect Ariadne 1.1.1 closes each subscription's generator while its own observer
    # task is still iterating it: "RuntimeError: aclose(): asynchronous generator is already
    # running", a traceback per subscriber. Counted instead (the source ends on its own).
    async def stop_websocket_operation(self, websocket, operation):
        try:
            await super().stop_websocket_operation(websocket, operation)
        except RuntimeError:
            stats["acloseErrors"] += 1

    # Ariadne's loop, with the count.
    async def keep_websocket_alive(self, websocket):
        if not self.keepalive:
            return
        while websocket.application_state != WebSocketState.DISCONNECTED:
            try:
                await websocket.send_json({"type": GraphQLWSHandler.GQL_CONNECTION_KEEP_ALIVE})
            except (WebSocketDisconnect, RuntimeError):
                return
            stats["keepAlives"] += 1
            await asyncio.sleep(self.keepalive)


def make_app(keepalive_s):
    schema = make_executable_schema(type_defs, query, mutation, subscription)
    by_protocol = {
        "graphql-transport-ws": GraphQL(
            schema,
            websocket_handler=CountingTransportWS(
                connection_init_wait_timeout=timedelta(seconds=10)
            ),
        ),
        "graphql-ws": GraphQL(schema, websocket_handler=CountingGraphQLWS(keepalive=keepalive_s)),
    }

    async def app(scope, receive, send):
        if scope["type"] == "http":
            if scope["path"] == "/stats" and scope["method"] == "GET":
                await serve.send_stats(send, stats)
            else:
                # GraphQL over HTTP too, as Ariadne serves it.
                await by_protocol["graphql-transport-ws"](scope, receive, send)
            return
        if scope["type"] != "websocket":
            return
        offered = scope.get("subprotocols") or []
        chosen = next((p for p in offered if p in by_protocol), None)
        if scope["path"] != "/graphql" or chosen is None:
            # Refused before the upgrade completes: 403.
            await receive()
            await send({"type": "websocket.close", "code": 1002})
            return
        stats["connections"][chosen] += 1
        stats["open"] += 1
        try:
            await by_protocol[chosen](scope, receive, send)
        finally:
            stats["open"] -= 1

    return app


class StatsOnShutdown(uvicorn.Server):
    """uvicorn stops on TERM and INT, then raises the signal again once it is done (the process
    ends there): the stats go to stderr as it shuts down."""

    async def shutdown(self, sockets=None):
        await super().shutdown(sockets=sockets)
        serve.log(NAME, str(stats))


def main():
    p = serve.parser("Ariadne GraphQL on uvicorn, both WebSocket subprotocols")
    p.add_argument("--ping-ms", type=int, default=5000)
    p.add_argument("--ping-timeout-ms", type=int, default=5000)
    p.add_argument("--keepalive-ms", type=int, default=5000)
    args = p.parse_args()
    sock = serve.listening_socket(args.host, args.port)
    config = uvicorn.Config(
        make_app(args.keepalive_ms / 1000),
        lifespan="off",
        log_level="warning",
        access_log=False,
        ws="websockets-sansio",
        ws_ping_interval=args.ping_ms / 1000 if args.ping_ms else None,
        ws_ping_timeout=args.ping_timeout_ms / 1000,
        timeout_graceful_shutdown=1,
    )
    server = StatsOnShutdown(config)

    async def run():
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            serve.announce(NAME, *sock.getsockname()[:2])
        await task

    asyncio.run(run())


if __name__ == "__main__":
    main()
