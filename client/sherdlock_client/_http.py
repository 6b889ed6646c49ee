"""HTTP/1.1 as the API speaks it, without I/O: requests as bytes, answers read from a buffer.

Shared by the blocking and the asyncio transports. A request is written as one formatted
string; an answer is framed by its ``Content-Length`` (or its chunks, or the end of the
connection), which is all the API's answers need. ``http.client`` parses every header block
with the ``email`` package and builds a message object per answer, which costs the calling
process more than the rest of a call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from .errors import ApiError, BadAnswer, api_error

API_PREFIX = "/api/v1/"
USER_AGENT = "sherdlock-client/0.1"
# The longest header block accepted: the API's are a few hundred bytes.
MAX_HEAD = 64 * 1024

CHUNKED = -1  # the body comes in chunks
TO_CLOSE = -2  # the body runs to the end of the connection


@dataclass(frozen=True, slots=True)
class Server:
    """Where the API is: host, port, TLS, and the path prefix of its URLs."""

    host: str
    port: int
    tls: bool
    root: str  # the path of /api/v1/ on this server

    @classmethod
    def parse(cls, base_url: str) -> Server:
        """Read ``http[s]://host[:port][/prefix]`` (a URL ending in /api/v1/ works too)."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected http://host[:port], got {base_url!r}")
        tls = parts.scheme == "https"
        path = parts.path.rstrip("/")
        if path.endswith(API_PREFIX.rstrip("/")):
            path = path[: -len(API_PREFIX.rstrip("/"))]
        return cls(parts.hostname, parts.port or (443 if tls else 80), tls, path + API_PREFIX)

    def head(self, api_key: str) -> bytes:
        """Return the header lines every request carries."""
        default = (self.tls and self.port == 443) or (not self.tls and self.port == 80)
        host = self.host if default else f"{self.host}:{self.port}"
        return (
            f"Host: {host}\r\nAuthorization: Api-Key {api_key}\r\nUser-Agent: {USER_AGENT}\r\n"
            "Accept: application/json\r\n"
        ).encode("latin-1")


def path_segment(value: str) -> str:
    """Quote ``value`` as one path segment (a tx id or wallet)."""
    return quote(value, safe="")


def target(server: Server, path: str, query: dict[str, Any] | None = None) -> str:
    """Return the request target of API ``path`` with ``query`` (None values left out)."""
    pairs = {k: v for k, v in (query or {}).items() if v is not None}
    return server.root + path + ("?" + urlencode(pairs) if pairs else "")


def follow(next_url: str) -> str:
    """Return the request target of a listing's ``next`` URL (always on the same server)."""
    parts = urlsplit(next_url)
    return parts.path + ("?" + parts.query if parts.query else "")


def request(method: str, target: str, head: bytes, body: object = None) -> bytes:
    """Return the bytes of a request; ``body`` (if not None) is sent as JSON."""
    if body is None:
        return f"{method} {target} HTTP/1.1\r\n".encode() + head + b"\r\n"
    payload = json.dumps(body, separators=(",", ":")).encode()
    return (
        f"{method} {target} HTTP/1.1\r\n".encode()
        + head
        + f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )


@dataclass(slots=True)
class Answer:
    """An HTTP answer: status, header fields (lower-case names) and body."""

    status: int
    fields: dict[str, str]
    body: bytes = b""

    @property
    def keep_alive(self) -> bool:
        """Tell whether the connection may carry another request."""
        return self.fields.get("connection", "").lower() != "close"


def parse_head(block: bytes) -> Answer:
    """Read a status line and header fields (``block`` without its blank line)."""
    lines = block.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise BadAnswer(f"not an HTTP/1.1 answer: {lines[0][:100]!r}")
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    return Answer(int(parts[1]), fields)


def framing(answer: Answer, method: str) -> int:
    """Return how the body of ``answer`` is framed: its length, CHUNKED or TO_CLOSE."""
    if method == "HEAD" or answer.status in (204, 304) or 100 <= answer.status < 200:
        return 0
    if answer.fields.get("transfer-encoding", "").lower() == "chunked":
        return CHUNKED
    length = answer.fields.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise BadAnswer(f"bad Content-Length: {length!r}")
        return int(length)
    return TO_CLOSE


def chunk_size(line: bytes) -> int:
    """Return the size a chunk's header line announces."""
    try:
        return int(line.split(b";", 1)[0], 16)
    except ValueError:
        raise BadAnswer(f"bad chunk header: {line[:40]!r}") from None


def retry_after(answer: Answer) -> float | None:
    """Return the seconds of the answer's Retry-After header (None: absent or a date)."""
    value = answer.fields.get("retry-after")
    if value is None or not value.isdigit():
        return None
    return float(value)


def decode(answer: Answer) -> Any:
    """Return the JSON body of a successful answer; raise the API's error for a refusal."""
    if 200 <= answer.status < 300:
        try:
            # Numbers stay exact: the API's quantities are strings, but a float must not round.
            return json.loads(answer.body, parse_float=Decimal) if answer.body else {}
        except ValueError:
            raise BadAnswer(f"{answer.status} answer is not JSON: {answer.body[:200]!r}") from None
    raise refusal(answer)


def refusal(answer: Answer) -> ApiError:
    """Return the exception an error answer stands for."""
    text = answer.body.decode("utf-8", errors="replace")
    try:
        body = json.loads(answer.body, parse_float=Decimal)
    except ValueError:
        body = None
    return api_error(answer.status, body, retry_after(answer), text)
