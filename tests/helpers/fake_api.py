"""A fake Sherdlock API (stdlib http.server) for the client's tests: scripted answers."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WAIT = 5.0  # bound on every wait; each returns as soon as its condition holds
SELECTED = {
    "tx_id": "tx-1",
    "tokens": [{"id": 1, "quantity": "7"}],
    "total": "7",
    "expires_at": "2030-01-01T00:00:00Z",
    "fence": 42,
}


@dataclass
class Answer:
    status: int = 200
    body: object = None
    headers: dict[str, str] | None = None
    raw: bytes | None = None


class FakeApi:
    """Record requests; answer each path from a script of Answers (the last one repeats)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.scripts: dict[str, list[Answer]] = {}
        self.lock = threading.Condition()

    def script(self, path: str, *answers: Answer) -> None:
        self.scripts[path] = list(answers)

    def answer(self, path: str) -> Answer:
        script = self.scripts.get(path)
        if not script:
            return Answer(404, {"code": "not_found", "detail": f"no route {path}", "fields": {}})
        answer = script.pop(0) if len(script) > 1 else script[0]
        return answer() if callable(answer) else answer

    def record(self, request: dict) -> None:
        with self.lock:
            self.requests.append(request)
            self.lock.notify_all()

    def calls(self, path: str) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if r["path"] == path]

    def wait_for(self, path: str, count: int) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: len(self.calls(path)) >= count, WAIT)


def error(status: int, code: str, detail: str = "no", fields=None, headers=None, **extra) -> Answer:
    body = {"code": code, "detail": detail, "fields": fields or {}, **extra}
    return Answer(status, body, headers)


@contextlib.contextmanager
def serve() -> Iterator[FakeApi]:
    """Run a FakeApi on a free local port; yield it with its ``url`` set."""
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            fake.record(
                {
                    "method": "POST",
                    "path": self.path,
                    "headers": dict(self.headers),
                    "body": json.loads(raw) if raw else None,
                }
            )
            answer = fake.answer(self.path)
            payload = answer.raw if answer.raw is not None else json.dumps(answer.body).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (answer.headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args) -> None:  # keep test output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
