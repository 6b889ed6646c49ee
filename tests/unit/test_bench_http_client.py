"""The load processes' HTTP client reads every framing an answer may have, and reconnects."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from bench.http_client import Api


class Server:
    """Answer each request on a connection with the next canned answer, then maybe close."""

    def __init__(self, answers: list[tuple[bytes, bool]]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.answers:
            conn, _ = self.listener.accept()
            with conn:
                buffer = b""
                while self.answers:
                    while b"\r\n\r\n" not in buffer:
                        data = conn.recv(65536)
                        if not data:
                            break
                        buffer += data
                    if b"\r\n\r\n" not in buffer:
                        break
                    head, _, rest = buffer.partition(b"\r\n\r\n")
                    sized = head.lower().split(b"content-length: ")
                    length = int(sized[1].split(b"\r\n")[0]) if len(sized) > 1 else 0
                    while len(rest) < length:
                        rest += conn.recv(65536)
                    self.requests.append(head + b"\r\n\r\n" + rest[:length])
                    buffer = rest[length:]
                    answer, close = self.answers.pop(0)
                    conn.sendall(answer)
                    if close:
                        break

    def stop(self) -> None:
        self.listener.close()


def answer(status: str, body: bytes, *fields: str) -> bytes:
    head = "".join(f"{field}\r\n" for field in fields)
    return f"HTTP/1.1 {status}\r\n{head}\r\n".encode() + body


@pytest.fixture
def serve():
    servers = []

    def start(*answers: tuple[bytes, bool]) -> Server:
        servers.append(Server(list(answers)))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_a_request_carries_the_key_and_a_json_body_and_reads_a_sized_answer(serve):
    body = json.dumps({"tx_id": "t", "total": "5"}).encode()
    server = serve(
        (answer("201 Created", body, f"Content-Length: {len(body)}"), False),
        (answer("429 Too Many Requests", b"{}", "Content-Length: 2", "Retry-After: 1.5"), False),
    )
    api = Api(server.port, "secret")

    assert api.post("/api/v1/selections/", {"tx_id": "t"}) == (
        201,
        {"tx_id": "t", "total": "5"},
        None,
    )
    assert api.post("/x/", headers={"Prefer": "wait=1"}) == (429, {}, 1.5)

    first, second = server.requests
    assert first.startswith(b"POST /api/v1/selections/ HTTP/1.1\r\n")
    assert b"Authorization: Api-Key secret\r\n" in first
    assert first.endswith(b'\r\n\r\n{"tx_id": "t"}')
    assert b"Prefer: wait=1\r\n" in second and second.endswith(b"\r\n\r\n{}")
    api.close()


def test_chunked_and_connection_delimited_answers_are_read_whole(serve):
    server = serve(
        (
            answer(
                "200 OK",
                b'4\r\n{"a"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\n\r\n',
                "Transfer-Encoding: chunked",
            ),
            False,
        ),
        (answer("500 Internal Server Error", b"oops"), True),
        (answer("200 OK", b'{"b": 2}', "Content-Length: 8"), False),
    )
    api = Api(server.port, "k")

    assert api.post("/one/") == (200, {"a": 1}, None)
    assert api.post("/two/") == (500, {"code": "not_json"}, None)
    assert api.post("/three/") == (200, {"b": 2}, None)  # on a new connection
    api.close()


def test_a_connection_the_server_closed_is_reopened_and_the_request_sent_again(serve):
    server = serve(
        (answer("200 OK", b"{}", "Content-Length: 2"), True),
        (answer("200 OK", b'{"again": true}', "Content-Length: 15"), False),
    )
    api = Api(server.port, "k")
    assert api.post("/first/")[0] == 200

    assert api.post("/second/", {"n": 1}) == (200, {"again": True}, None)

    assert [r.split(b" ", 2)[1] for r in server.requests] == [b"/first/", b"/second/"]
    api.close()


def test_a_get_without_a_key_sends_no_credentials(serve):
    server = serve((answer("200 OK", b'{"status": "ok"}', "Content-Length: 16"), False))
    api = Api(server.port, None)

    assert api.get("/healthz") == (200, {"status": "ok"}, None)

    (request,) = server.requests
    assert request.startswith(b"GET /healthz HTTP/1.1\r\n") and b"Authorization" not in request
    api.close()
