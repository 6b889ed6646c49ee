"""Kept-alive connections for the blocking client: a pool that threads share."""

from __future__ import annotations

import select
import socket
import ssl
import threading

from . import _http
from ._http import CHUNKED, MAX_HEAD, TO_CLOSE, Answer, Server
from .errors import AnswerLost, BadAnswer, Unreachable

# Idle connections kept per client beyond those in use; more are opened as threads need them
# and closed when returned to a full pool.
MAX_IDLE = 16
RECEIVE = 65536


class _Closed(Exception):
    """The server closed the connection."""


class Connection:
    """One connection to the server, read through a buffer."""

    __slots__ = ("buffer", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def dropped(self) -> bool:
        """Tell whether the server closed this idle connection (or sent what nobody asked)."""
        if isinstance(self.sock, ssl.SSLSocket):
            return False  # TLS records arrive unasked (session tickets): tell by the exchange
        # Readable while idle: at its end, or holding bytes no request asked for. (A peek
        # would wait for the socket's timeout.)
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def close(self) -> None:
        self.sock.close()

    def exchange(self, data: bytes, method: str, timeout: float) -> Answer:
        """Send one request and read its answer."""
        self.sock.settimeout(timeout)
        self.sock.sendall(data)
        answer = _http.parse_head(self._until(b"\r\n\r\n", MAX_HEAD))
        size = _http.framing(answer, method)
        if size >= 0:
            answer.body = self._exactly(size)
        elif size == CHUNKED:
            chunks = []
            while size := _http.chunk_size(self._until(b"\r\n", MAX_HEAD)):
                chunks.append(self._exactly(size))
                self._until(b"\r\n", 2)
            while self._until(b"\r\n", MAX_HEAD):  # trailers, up to the blank line
                pass
            answer.body = b"".join(chunks)
        else:
            assert size == TO_CLOSE
            while True:
                try:
                    self._receive()
                except _Closed:
                    break
            answer.body, self.buffer = self.buffer, b""
            answer.fields["connection"] = "close"
        return answer

    def _receive(self) -> None:
        data = self.sock.recv(RECEIVE)
        if not data:
            raise _Closed
        self.buffer += data

    def _until(self, marker: bytes, limit: int) -> bytes:
        """Return the buffered bytes before ``marker`` (receiving as needed), consuming both."""
        while (end := self.buffer.find(marker)) < 0:
            if len(self.buffer) > limit:
                raise BadAnswer("an answer's header block is too long")
            self._receive()
        found, self.buffer = self.buffer[:end], self.buffer[end + len(marker) :]
        return found

    def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._receive()
        found, self.buffer = self.buffer[:size], self.buffer[size:]
        return found


class Pool:
    """The connections of one client; safe to share between threads."""

    def __init__(self, server: Server, connect_timeout: float, max_idle: int = MAX_IDLE) -> None:
        self.server = server
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._tls = ssl.create_default_context() if server.tls else None
        self.opened = 0  # connections opened so far

    def exchange(self, data: bytes, method: str, timeout: float) -> Answer:
        """Send a request on an idle connection (or a new one) and return its answer.

        Raise Unreachable when no connection could be opened (nothing was sent), AnswerLost
        when the request was sent and no whole answer came back.
        """
        connection = self._take()
        try:
            answer = connection.exchange(data, method, timeout)
        except TimeoutError:
            connection.close()
            raise AnswerLost(f"no answer from {self._where()} within {timeout}s") from None
        except (_Closed, OSError) as exc:
            connection.close()
            reason = "the server closed the connection" if isinstance(exc, _Closed) else exc
            raise AnswerLost(f"{self._where()}: {reason}") from None
        except BaseException:
            connection.close()
            raise
        if answer.keep_alive:
            self._give(connection)
        else:
            connection.close()
        return answer

    def close(self) -> None:
        """Close the idle connections; those in use close when their call ends."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _take(self) -> Connection:
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._open()
            # The server closes kept-alive connections that stay idle: such a one would lose
            # the next request, and only some requests may be sent again.
            if not connection.dropped():
                return connection
            connection.close()

    def _give(self, connection: Connection) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(connection)
                return
        connection.close()

    def _open(self) -> Connection:
        address = (self.server.host, self.server.port)
        try:
            sock = socket.create_connection(address, timeout=self.connect_timeout)
        except OSError as exc:
            raise Unreachable(f"cannot connect to {self._where()}: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            try:
                sock = self._tls.wrap_socket(sock, server_hostname=self.server.host)
            except OSError as exc:
                sock.close()
                raise Unreachable(f"TLS with {self._where()} failed: {exc}") from None
        self.opened += 1
        return Connection(sock)

    def _where(self) -> str:
        return f"{self.server.host}:{self.server.port}"
