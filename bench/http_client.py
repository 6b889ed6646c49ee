"""The load processes' HTTP client: one kept-alive HTTP/1.1 connection, as little work as it takes.

The load processes share the machine's cores with the server they measure, so whatever a client
spends per request is taken from the server. ``http.client`` parses every answer's header block
with the ``email`` package and builds a message object per request: with it the load processes
used 0.75-0.95 ms of CPU per select + spend/release cycle (spread, R = 8), about half of what a
whole library cycle costs; with this client 0.45 ms. It writes a request as one formatted string
and reads an answer by its ``Content-Length`` (or its chunks, or to the end of the connection),
which is all the API's answers need; the JSON bodies are still encoded and decoded.
"""

from __future__ import annotations

import json
import socket


class Closed(ConnectionError):
    """The server closed the connection before answering."""


class Api:
    """One client connection speaking the selections API."""

    def __init__(
        self, port: int, key: str | None, host: str = "127.0.0.1", timeout: float = 60
    ) -> None:
        self.address = (host, port)
        self.timeout = timeout
        credentials = f"Authorization: Api-Key {key}\r\n" if key is not None else ""
        self.head = f"Host: {host}:{port}\r\n{credentials}"
        self.sock: socket.socket | None = None
        self.buffer = b""

    def post(
        self, path: str, body: dict | None = None, headers: dict | None = None
    ) -> tuple[int, dict, float | None]:
        """POST ``body``; return (status, JSON body, Retry-After seconds or None).

        A kept-alive connection the server closed meanwhile (gunicorn drops idle ones after a
        few seconds) is reopened and the request sent again: every request of this API may be
        repeated (a transaction id names its selection).
        """
        payload = json.dumps(body or {}).encode()
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        return self._exchange(
            f"POST {path} HTTP/1.1\r\n{self.head}{extra}Content-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )

    def get(self, path: str) -> tuple[int, dict, float | None]:
        """GET ``path``; return what ``post`` returns."""
        return self._exchange(f"GET {path} HTTP/1.1\r\n{self.head}\r\n".encode())

    def _exchange(self, request: bytes) -> tuple[int, dict, float | None]:
        for retry in (False, True):
            try:
                if self.sock is None:
                    self._connect()
                assert self.sock is not None
                self.sock.sendall(request)
                status, fields, content = self._answer()
                break
            except (Closed, BrokenPipeError, ConnectionResetError):
                self.close()
                if retry:
                    raise
        if fields.get("connection", "").lower() == "close":
            self.close()
        retry_after = fields.get("retry-after")
        try:
            data = json.loads(content) if content else {}
        except ValueError:
            data = {"code": "not_json"}
        return status, data, float(retry_after) if retry_after else None

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.buffer = None, b""

    def _connect(self) -> None:
        sock = socket.create_connection(self.address, timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.buffer = sock, b""

    def _receive(self) -> None:
        assert self.sock is not None
        data = self.sock.recv(65536)
        if not data:
            raise Closed("the server closed the connection")
        self.buffer += data

    def _until(self, marker: bytes) -> bytes:
        """Return the buffered bytes before ``marker`` (receiving as needed), consuming both."""
        while (end := self.buffer.find(marker)) < 0:
            self._receive()
        found, self.buffer = self.buffer[:end], self.buffer[end + len(marker) :]
        return found

    def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._receive()
        found, self.buffer = self.buffer[:size], self.buffer[size:]
        return found

    def _answer(self) -> tuple[int, dict[str, str], bytes]:
        """Read one answer: status, header fields (lower-case names) and body."""
        lines = self._until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if "content-length" in fields:
            return status, fields, self._exactly(int(fields["content-length"]))
        if fields.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self._until(b"\r\n").split(b";", 1)[0], 16):
                chunks.append(self._exactly(size))
                self._until(b"\r\n")
            self._until(b"\r\n")  # no trailers are sent
            return status, fields, b"".join(chunks)
        if status in (204, 304) or 100 <= status < 200:
            return status, fields, b""
        # Neither length nor chunks: the body runs to the end of the connection.
        while True:
            try:
                self._receive()
            except Closed:
                content, self.buffer = self.buffer, b""
                fields["connection"] = "close"
                return status, fields, content
