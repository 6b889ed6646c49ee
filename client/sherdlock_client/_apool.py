"""Kept-alive connections for the asyncio client, on asyncio streams."""

from __future__ import annotations

import asyncio
import contextlib
import ssl

from . import _http
from ._http import CHUNKED, MAX_HEAD, TO_CLOSE, Answer, Server
from .errors import AnswerLost, BadAnswer, Unreachable

# As the blocking pool's (sherdlock_client._pool).
MAX_IDLE = 16


class AsyncConnection:
    """One connection to the server."""

    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def dropped(self) -> bool:
        """Tell whether the server closed this idle connection (or sent what nobody asked)."""
        return self.reader.at_eof() or self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()

    async def exchange(self, data: bytes, method: str) -> Answer:
        """Send one request and read its answer."""
        self.writer.write(data)
        await self.writer.drain()
        answer = _http.parse_head(await self._until(b"\r\n\r\n"))
        size = _http.framing(answer, method)
        if size >= 0:
            answer.body = await self.reader.readexactly(size)
        elif size == CHUNKED:
            chunks = []
            while size := _http.chunk_size(await self._until(b"\r\n")):
                chunks.append(await self.reader.readexactly(size))
                await self._until(b"\r\n")
            while await self._until(b"\r\n"):  # trailers, up to the blank line
                pass
            answer.body = b"".join(chunks)
        else:
            assert size == TO_CLOSE
            answer.body = await self.reader.read()
            answer.fields["connection"] = "close"
        return answer

    async def _until(self, marker: bytes) -> bytes:
        try:
            return (await self.reader.readuntil(marker))[: -len(marker)]
        except asyncio.LimitOverrunError:
            raise BadAnswer("an answer's header block is too long") from None


class AsyncPool:
    """The connections of one asyncio client (used from one event loop)."""

    def __init__(self, server: Server, connect_timeout: float, max_idle: int = MAX_IDLE) -> None:
        self.server = server
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self._idle: list[AsyncConnection] = []
        self._tls = ssl.create_default_context() if server.tls else None
        self.opened = 0

    async def exchange(self, data: bytes, method: str, timeout: float) -> Answer:
        """As the blocking pool's ``exchange`` (sherdlock_client._pool)."""
        connection = await self._take()
        try:
            async with asyncio.timeout(timeout):
                answer = await connection.exchange(data, method)
        except TimeoutError:
            connection.close()
            raise AnswerLost(f"no answer from {self._where()} within {timeout}s") from None
        except (asyncio.IncompleteReadError, OSError) as exc:
            connection.close()
            reason = (
                "the server closed the connection"
                if isinstance(exc, asyncio.IncompleteReadError)
                else exc
            )
            raise AnswerLost(f"{self._where()}: {reason}") from None
        except BaseException:
            connection.close()
            raise
        if answer.keep_alive and len(self._idle) < self.max_idle:
            self._idle.append(connection)
        else:
            connection.close()
        return answer

    async def close(self) -> None:
        """Close the idle connections."""
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
        for connection in idle:
            with contextlib.suppress(OSError):
                await connection.writer.wait_closed()

    async def _take(self) -> AsyncConnection:
        while self._idle:
            connection = self._idle.pop()
            # As the blocking pool: a connection the server closed while idle is not used.
            if not connection.dropped():
                return connection
            connection.close()
        return await self._open()

    async def _open(self) -> AsyncConnection:
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    self.server.host,
                    self.server.port,
                    ssl=self._tls,
                    limit=MAX_HEAD,
                )
        except (OSError, TimeoutError) as exc:
            raise Unreachable(f"cannot connect to {self._where()}: {exc}") from None
        self.opened += 1
        return AsyncConnection(reader, writer)

    def _where(self) -> str:
        return f"{self.server.host}:{self.server.port}"
