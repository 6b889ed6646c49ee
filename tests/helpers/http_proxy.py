"""A TCP proxy in front of a real web server that plays faults, one planned step per request.

Each request a client sends through it is taken by the next step of the plan: ``FORWARD``
(the default once the plan is used up) relays it and its answer; ``DROP_ANSWER`` relays the
request, reads the server's whole answer and closes the client's connection instead of
passing it on (the server acted, the client never hears); ``DROP_REQUEST`` closes the
connection before the server sees anything; ``answer(...)`` answers in the server's stead.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

FORWARD = "forward"
DROP_ANSWER = "drop_answer"
DROP_REQUEST = "drop_request"


def answer(status: int, code: str, retry_after: str | None = None) -> bytes:
    """Return an API error answer as the server would send it."""
    body = f'{{"code":"{code}","detail":"injected","fields":{{}}}}'.encode()
    head = f"HTTP/1.1 {status} Injected\r\nContent-Type: application/json\r\n"
    if retry_after is not None:
        head += f"Retry-After: {retry_after}\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


class _Stream:
    """A socket read by HTTP/1.1 message, framed by Content-Length."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def message(self) -> bytes | None:
        """Return the next whole message (head and body), or None at the end of the stream."""
        while b"\r\n\r\n" not in self.buffer:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buffer += data
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            data = self.sock.recv(65536)
            if not data:
                return None
            rest += data
        self.buffer = rest[length:]
        return head + b"\r\n\r\n" + rest[:length]


class FaultProxy:
    """Listen on a free local port and pass requests to ``upstream`` as planned."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._plan: list[str | bytes] = []
        self._lock = threading.Lock()
        self.requests: list[bytes] = []  # every request line seen, in order
        self.connections = 0

    def plan(self, *steps: str | bytes) -> None:
        """Take the next requests with ``steps``, in order."""
        with self._lock:
            self._plan.extend(steps)

    def _next_step(self, request: bytes) -> str | bytes:
        with self._lock:
            self.requests.append(request.split(b"\r\n", 1)[0])
            return self._plan.pop(0) if self._plan else FORWARD

    def serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        server = socket.create_connection(self.upstream)
        incoming, outgoing = _Stream(client), _Stream(server)
        with client, server:
            while (request := incoming.message()) is not None:
                step = self._next_step(request)
                if isinstance(step, bytes):
                    client.sendall(step)
                    continue
                if step == DROP_REQUEST:
                    return
                server.sendall(request)
                reply = outgoing.message()
                if reply is None or step == DROP_ANSWER:
                    return
                client.sendall(reply)

    def close(self) -> None:
        self.listener.close()


@contextlib.contextmanager
def fault_proxy(base: str) -> Iterator[FaultProxy]:
    """Run a FaultProxy in front of the server at ``base`` (http://host:port)."""
    host, port = base.removeprefix("http://").split(":")
    proxy = FaultProxy((host, int(port)))
    thread = threading.Thread(target=proxy.serve, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.close()
