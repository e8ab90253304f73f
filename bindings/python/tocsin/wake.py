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
from ._util import Duration, as_bool, as_int, duration_ms
from .stream import Event, Notification

if TYPE_CHECKING:
    from .db import Database

__all__ = ["Listener", "Subscription", "Wake"]


async def readable(fd: int, timeout: Optional[float] = None) -> bool:
    """Waits until ``fd`` is readable (True) or ``timeout`` seconds pass (False)."""
    reader = Reader(fd)
    try:
        return await reader.wait(timeout)
    finally:
        reader.close()


class Reader:
    """Waits on the running loop for one descriptor, again and again. The loop's reader
    stays registered from one wait to the next (adding and removing it costs two system
    calls per wake); it is dropped when the descriptor turns readable with nobody waiting
    (a readable descriptor would otherwise run the callback on every loop iteration) and
    by close()."""

    __slots__ = ("fd", "_loop", "_fut")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._fut: Optional[asyncio.Future] = None

    def _ready(self) -> None:
        fut = self._fut
        if fut is None or fut.done():
            self._drop()
        else:
            fut.set_result(True)

    def _drop(self) -> None:
        if self._loop is not None:
            try:
                self._loop.remove_reader(self.fd)
            except Exception:  # the loop is closed: nothing is registered any more
                pass
            self._loop = None

    async def wait(self, timeout: Optional[float] = None) -> bool:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._drop()
            loop.add_reader(self.fd, self._ready)
            self._loop = loop
        fut = self._fut = loop.create_future()
        timer = None if timeout is None else loop.call_later(max(0.0, timeout), _expire, fut)
        try:
            return await fut
        finally:
            self._fut = None
            if timer is not None:
                timer.cancel()

    def close(self) -> None:
        """Drops the loop's reader and ends a pending wait, which returns True: call it
        once the subscription is closed, so that the waiter finds it closed. From
        another thread than the loop's, this happens on the loop's thread."""
        loop = self._loop
        if loop is None:
            return
        try:
            running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._end()
        else:
            try:
                loop.call_soon_threadsafe(self._end)
            except RuntimeError:  # the loop is closed
                self._loop = None

    def _end(self) -> None:
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(True)
        self._drop()


def _expire(fut: "asyncio.Future") -> None:
    if not fut.done():
        fut.set_result(False)


MAX_WAIT_MS = 2 ** 31 - 1
"""The longest single wait of the C layer (an int of ms, about 24.8 days)."""


def timeout_ms(timeout: Optional[Duration]) -> int:
    """A wait's bound in ms (-1: none); longer ones than MAX_WAIT_MS end at that."""
    return -1 if timeout is None else min(duration_ms(timeout, "timeout"), MAX_WAIT_MS)


class Wake:
    """A raw subscription to commits on the database file (``db.subscribe()``): a wake
    means "something may have changed, re-read". Wakes coalesce and may be spurious."""

    def __init__(self, db: "Database") -> None:
        self._s = _tocsin.Sub(db._h)
        self._reader: Optional[Reader] = None
        db._track(self)

    def fileno(self) -> int:
        return self._s.fileno()

    def wait(self, timeout: Optional[Duration] = None) -> bool:
        """Blocks (GIL released) until a wake (True) or the timeout (False)."""
        return self._s.wait(timeout_ms(timeout))

    async def wait_async(self, timeout: Optional[Duration] = None) -> bool:
        if self._s.drain():
            return True
        if self._reader is None:
            self._reader = Reader(self._s.fileno())
        if not await self._reader.wait(None if timeout is None else duration_ms(timeout, "timeout") / 1000):
            return False
        self._s.drain()
        return True

    def poke(self) -> None:
        """Ends a blocked wait from another thread."""
        self._s.poke()

    def close(self) -> None:
        self._s.close()
        if self._reader is not None:  # after: a wait it ends finds the subscription closed
            self._reader.close()

    def __enter__(self) -> "Wake":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Waiting:
    """Common iteration over a core listener / stream subscription."""

    _make: Any

    def __init__(self, w: Any) -> None:
        self._w = w
        self._reader: Optional[Reader] = None
        self._buf: Deque[Any] = collections.deque()
        self._last: Optional[int] = None  # the id of the last item handed to the caller
        # the id handed out before it by iteration (None after get(): a batch, not one item)
        self._prev: Optional[int] = None
        # a read of the core's ended in an exception (a KeyboardInterrupt may land after the
        # core handed a batch over and before it was buffered): the core may be past _last
        self._unhanded = False

    def fileno(self) -> int:
        return self._w.fileno()

    def _read(self, ms: int) -> List[Any]:
        """The core's next batch, made into items; an exception on the way (an interrupt
        after the core handed the batch over) is noted for close and save."""
        try:
            return [self._make(r) for r in self._w.next(ms)]
        except BaseException:
            self._unhanded = True
            raise

    def get(self, timeout: Optional[Duration] = None) -> List[Any]:
        """What arrived since the last call, waiting up to ``timeout`` (None: no bound) for
        at least one; [] at the timeout or after close()."""
        if self._buf:
            out = list(self._buf)
            self._buf.clear()
        elif self._w.closed:
            return []
        else:
            out = self._read(timeout_ms(timeout))
        if out:
            self._last = out[-1].id
            self._prev = None
        return out

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        # asked for the next one, the loop body has finished the last: an exception from
        # here on (an interrupt in the read) is not its, and does not take that event back
        self._prev = None
        while not self._buf:
            if self._w.closed:
                raise StopIteration
            self._buf.extend(self._read(-1))
        item = self._buf.popleft()
        self._prev, self._last = self._last, item.id
        return item

    def __aiter__(self) -> AsyncIterator[Any]:
        return self  # type: ignore[return-value]

    async def __anext__(self) -> Any:
        self._prev = None  # (as in __next__)
        while not self._buf:
            if self._w.closed:
                raise StopAsyncIteration
            self._buf.extend(self._read(0))
            if self._buf:
                break
            await self._readable()
        item = self._buf.popleft()
        self._prev, self._last = self._last, item.id
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
            await self._readable(left)

    def _readable(self, timeout: Optional[float] = None) -> Any:
        if self._reader is None:
            self._reader = Reader(self._w.fileno())
        return self._reader.wait(timeout)

    def _drop_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def stop(self) -> None:
        """Ends a blocked get()/iteration from another thread (iteration goes on)."""
        self._w.poke()

    def close(self) -> None:
        """Ends the subscription (iteration stops)."""
        self._w.close()
        self._drop_reader()  # after: a wait it ends finds the subscription closed

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
        buffer_size = as_int(buffer_size, "buffer_size", 1, 10000)
        super().__init__(_tocsin.Listener(db._h, channel, buffer_size))
        self.channel = channel
        db._track(self)

    @property
    def dropped(self) -> int:
        return self._w.dropped()


class Subscription(_Waiting):
    """A stream subscription (``stream.subscribe(...)``): replays from the consumer's
    saved offset (or ``from_offset``), then follows live. A named consumer's offset is
    saved when the iteration ends -- close(), the end of a ``with`` block, or a ``break``
    out of a for loop (the subscription is then dropped) -- as the offset of the last
    event handed out, unless ``save_on_close=False``; also by autosave (every N events /
    S seconds) and by save(). A ``with`` block that ends with an exception does not
    count the event its loop was processing: the offset before it is saved, and it comes
    again. Delivery is at-least-once."""

    _make = Event

    def _settle(self) -> None:
        """Mid-batch (events of the core's batch still buffered here, not handed out):
        the core's position goes back to the last event handed out, and the rest comes
        again from the core. Every save (save(), save_on_close, autosave) then stores no
        more than was handed out."""
        # (never a call into the core otherwise: another thread may be blocked in its
        # read, holding the subscription until close() pokes it)
        if not self._w.closed and self._last is not None and (self._buf or self._unhanded):
            self._w.rewind(self._last)
            self._buf.clear()
            self._unhanded = False

    def close(self) -> None:
        """Ends the subscription (iteration stops), saving a named consumer's offset
        (the last event handed out) unless save_on_close=False."""
        self._settle()
        self._w.close()
        self._drop_reader()

    def _failed(self) -> None:
        """The ``with`` block ended with an exception: the event the loop body was
        processing (the last one iteration handed out, the body not having asked for the
        next) is not counted as processed, so close saves the offset before it and it
        comes again (at-least-once). An exception raised by the iteration itself (an
        interrupt in its read) leaves the events the body finished counted."""
        if self._w.closed or self._prev is None or self._last is None:
            return
        self._w.rewind(self._prev)
        self._buf.clear()
        self._unhanded = False
        self._last, self._prev = self._prev, None

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            if exc_type is not None:
                self._failed()
        finally:
            self.close()

    async def __aexit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            if exc_type is not None:
                self._failed()
        finally:
            self.close()

    def __del__(self) -> None:  # `for e in stream.subscribe(...): break` drops it here
        try:
            if not self._w.closed:
                self.close()
        except Exception:
            pass

    def __init__(self, db: "Database", topic: str, consumer: Optional[str], from_offset: Optional[int],
                 batch: int, autosave_every: Optional[int], autosave_interval: Optional[Duration],
                 save_on_close: bool = True) -> None:
        if from_offset is not None:  # None: the consumer's saved offset
            from_offset = as_int(from_offset, "from_offset", 0)
        batch = as_int(batch, "batch", 1, 10000)
        if autosave_every is not None:
            autosave_every = as_int(autosave_every, "autosave_every", 1)
        every_ms = 0 if autosave_interval is None else duration_ms(autosave_interval, "autosave_interval", allow_zero=False)
        super().__init__(_tocsin.StreamSub(db._h, topic, consumer,
                                           -1 if from_offset is None else from_offset, batch,
                                           autosave_every or 0, every_ms,
                                           as_bool(save_on_close, "save_on_close") and consumer is not None))
        self.topic = topic
        self.consumer = consumer
        self.save_on_close = save_on_close
        self._db = db
        self._last = self._w.position()  # nothing handed out yet: where it starts
        db._track(self)

    @property
    def position(self) -> int:
        """The offset of the last event handed out."""
        if self._last is not None:  # mid-batch, the core is past what was handed out
            return self._last
        return self._w.position()

    def save(self) -> None:
        """Saves the position (the last event handed out) as the consumer's offset now."""
        self._settle()
        self._w.save()
