"""Waiting without polling: the core's wake engine as Python iterators.

Sync waits block in C with the GIL released (Ctrl-C still works); async waits put
the subscription's descriptor on the event loop (``loop.add_reader``): no thread
per listener, nothing blocks the loop.
"""
from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING, Any, AsyncIterator, Deque, Iterator, List, Optional

from . import _tocsin
from ._tocsin import Closed, InvalidArgument, Timeout
from ._util import Duration, duration_ms
from .stream import Event, Notification

if TYPE_CHECKING:
    from .db import Database

__all__ = ["Listener", "Subscription", "Wake"]


async def readable(fd: int, timeout: Optional[float] = None) -> bool:
    """Waits until ``fd`` is readable (True) or ``timeout`` seconds pass (False)."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(True)

    loop.add_reader(fd, ready)
    try:
        if timeout is None:
            return await fut
        try:
            return await asyncio.wait_for(fut, max(0.0, timeout))
        except asyncio.TimeoutError:
            return False
    finally:
        loop.remove_reader(fd)


def timeout_ms(timeout: Optional[Duration]) -> int:
    return -1 if timeout is None else duration_ms(timeout, "timeout")


class Wake:
    """A raw subscription to commits on the database file (``db.subscribe()``): a wake
    means "something may have changed, re-read". Wakes coalesce and may be spurious."""

    def __init__(self, db: "Database") -> None:
        self._s = _tocsin.Sub(db._h)

    def fileno(self) -> int:
        return self._s.fileno()

    def wait(self, timeout: Optional[Duration] = None) -> bool:
        """Blocks (GIL released) until a wake (True) or the timeout (False)."""
        return self._s.wait(timeout_ms(timeout))

    async def wait_async(self, timeout: Optional[Duration] = None) -> bool:
        if self._s.drain():
            return True
        if not await readable(self._s.fileno(), None if timeout is None else duration_ms(timeout, "timeout") / 1000):
            return False
        self._s.drain()
        return True

    def poke(self) -> None:
        """Ends a blocked wait from another thread."""
        self._s.poke()

    def close(self) -> None:
        self._s.close()

    def __enter__(self) -> "Wake":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Waiting:
    """Common iteration over a core listener / stream subscription."""

    _make: Any

    def __init__(self, w: Any) -> None:
        self._w = w
        self._buf: Deque[Any] = collections.deque()
        self._last: Optional[int] = None  # the id of the last item handed to the caller

    def fileno(self) -> int:
        return self._w.fileno()

    def get(self, timeout: Optional[Duration] = None) -> List[Any]:
        """What arrived since the last call, waiting up to ``timeout`` (None: no bound) for
        at least one; [] at the timeout or after close()."""
        if self._buf:
            out = list(self._buf)
            self._buf.clear()
        elif self._w.closed:
            return []
        else:
            out = [self._make(r) for r in self._w.next(timeout_ms(timeout))]
        if out:
            self._last = out[-1].id
        return out

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        while not self._buf:
            if self._w.closed:
                raise StopIteration
            rows = self._w.next(-1)
            self._buf.extend(self._make(r) for r in rows)
        item = self._buf.popleft()
        self._last = item.id
        return item

    def __aiter__(self) -> AsyncIterator[Any]:
        return self  # type: ignore[return-value]

    async def __anext__(self) -> Any:
        while not self._buf:
            if self._w.closed:
                raise StopAsyncIteration
            rows = self._w.next(0)
            if rows:
                self._buf.extend(self._make(r) for r in rows)
                break
            await readable(self._w.fileno())
        item = self._buf.popleft()
        self._last = item.id
        return item

    async def get_async(self, timeout: Optional[Duration] = None) -> List[Any]:
        """get() for asyncio: waits on the event loop, never blocks it."""
        limit = None if timeout is None else duration_ms(timeout, "timeout") / 1000
        loop = asyncio.get_running_loop()
        end = None if limit is None else loop.time() + limit
        while True:
            got = self.get(0)
            if got or self._w.closed:
                return got
            left = None if end is None else end - loop.time()
            if left is not None and left <= 0:
                return []
            await readable(self._w.fileno(), left)

    def stop(self) -> None:
        """Ends a blocked get()/iteration from another thread (iteration goes on)."""
        self._w.poke()

    def close(self) -> None:
        """Ends the subscription (iteration stops)."""
        self._w.close()

    @property
    def closed(self) -> bool:
        return self._w.closed

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()


class Listener(_Waiting):
    """LISTEN on a channel (``db.listen(channel)``): notifications committed after it
    opened, in id order. A listener more than ``buffer_size`` behind loses the oldest
    (counted by ``dropped``); use a stream for lossless delivery."""

    _make = Notification

    def __init__(self, db: "Database", channel: str, buffer_size: int = 1000) -> None:
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or not 1 <= buffer_size <= 10000:
            raise InvalidArgument("buffer_size must be an integer from 1 to 10000")
        super().__init__(_tocsin.Listener(db._h, channel, buffer_size))
        self.channel = channel

    @property
    def dropped(self) -> int:
        return self._w.dropped()


class Subscription(_Waiting):
    """A stream subscription (``stream.subscribe(...)``): replays from the consumer's
    saved offset (or ``from_offset``), then follows live. A named consumer's offset is
    saved when the iteration ends -- close(), the end of a ``with`` block, or a ``break``
    out of a for loop (the subscription is then dropped) -- as the offset of the last
    event handed out, unless ``save_on_close=False``; also by autosave (every N events /
    S seconds) and by save(). Delivery is at-least-once."""

    _make = Event

    def close(self) -> None:
        """Ends the subscription (iteration stops), saving a named consumer's offset
        (the last event handed out) unless save_on_close=False."""
        if self._buf and self._last is not None and not self._w.closed:
            # left mid-batch: the rest was not handed out; the core saves (save_on_close,
            # autosave) up to the last event that was
            self._w.rewind(self._last)
            self._buf.clear()
        self._w.close()

    def __del__(self) -> None:  # `for e in stream.subscribe(...): break` drops it here
        try:
            if not self._w.closed:
                self.close()
        except Exception:
            pass

    def __init__(self, db: "Database", topic: str, consumer: Optional[str], from_offset: Optional[int],
                 batch: int, autosave_every: Optional[int], autosave_interval: Optional[Duration],
                 save_on_close: bool = True) -> None:
        if from_offset is not None and (isinstance(from_offset, bool) or not isinstance(from_offset, int) or from_offset < 0):
            raise InvalidArgument("from_offset must be an integer >= 0 (None: the consumer's saved offset)")
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10000:
            raise InvalidArgument("batch must be an integer from 1 to 10000")
        if autosave_every is not None and (isinstance(autosave_every, bool) or not isinstance(autosave_every, int) or autosave_every < 1):
            raise InvalidArgument("autosave_every must be an integer >= 1")
        every_ms = 0 if autosave_interval is None else duration_ms(autosave_interval, "autosave_interval", allow_zero=False)
        super().__init__(_tocsin.StreamSub(db._h, topic, consumer,
                                           -1 if from_offset is None else from_offset, batch,
                                           autosave_every or 0, every_ms,
                                           bool(save_on_close) and consumer is not None))
        self.topic = topic
        self.consumer = consumer
        self.save_on_close = bool(save_on_close)
        self._db = db

    @property
    def position(self) -> int:
        """The offset of the last event handed out."""
        return self._w.position()

    def save(self) -> None:
        """Saves the position as the consumer's offset now."""
        self._w.save()
