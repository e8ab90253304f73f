"""Durable streams and ephemeral notifications."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional

from ._tocsin import InvalidArgument
from ._util import Duration, as_bool, as_int, duration_ms, dumps, dumps_each, loads, meta_json
from ._util import items as _items

if TYPE_CHECKING:
    from .db import Database, Transaction
    from .wake import Subscription

__all__ = ["Stream", "Event", "Notification"]


class _Message:
    __slots__ = ("id", "_name", "key", "payload_json", "meta_json", "created_at")

    def __init__(self, row: tuple) -> None:
        self.id, self._name, self.key, self.payload_json, self.meta_json, self.created_at = row

    @classmethod
    def _from_row(cls, row: tuple) -> Any:
        return cls(row)

    @property
    def payload(self) -> Any:
        return loads(self.payload_json)

    @property
    def meta(self) -> Optional[Dict[str, Any]]:
        return loads(self.meta_json)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.id == self.id  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.id)


class Event(_Message):
    """A stream event: ``offset`` (== id), ``topic``, ``key``, ``payload``, ``meta``,
    ``created_at`` (ms since epoch)."""

    __slots__ = ()

    @property
    def offset(self) -> int:
        return self.id

    @property
    def topic(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return "<tocsin.Event %s@%d>" % (self._name, self.id)


class Notification(_Message):
    """A notification: ``id``, ``channel``, ``payload``, ``meta``, ``created_at``."""

    __slots__ = ()

    @property
    def channel(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return "<tocsin.Notification %s#%d>" % (self._name, self.id)


class Stream:
    """A durable, replayable stream (``db.stream(topic)``)."""

    def __init__(self, db: "Database", topic: str) -> None:
        self.db = db
        self.topic = topic
        self._h = db._h

    def __repr__(self) -> str:
        return "<tocsin.Stream %r>" % self.topic

    def publish(self, payload: Any, *, key: Optional[str] = None, meta: Optional[dict] = None,
                tx: Optional["Transaction"] = None) -> int:
        """Appends an event; returns its offset (increasing, never reused)."""
        return self.db._hx(tx).publish(self.topic, dumps(payload), key, meta_json(meta))

    def publish_many(self, payloads: Iterable[Any], *, keys: Optional[Iterable[Optional[str]]] = None,
                     tx: Optional["Transaction"] = None) -> List[int]:
        """Appends several events atomically; returns their offsets."""
        if isinstance(payloads, (str, bytes, bytearray, dict)):  # not its characters, nor its keys
            raise InvalidArgument("publish_many takes a list of payloads, not a %s (write [%r])"
                                  % (type(payloads).__name__, payloads))
        h = self.db._hx(tx)
        texts = dumps_each(list(_items(payloads, "payloads", "JSON values")), "event")
        return h.publish_many(self.topic, texts,
                              None if keys is None else list(_items(keys, "keys", "str or None, one per payload")))

    def read(self, after: int = 0, limit: int = 100) -> List[Event]:
        """Events with offset > ``after``, oldest first, at most ``limit``."""
        return [Event(r) for r in self.db._hx().stream_read(self.topic, after, limit)]

    def save_offset(self, consumer: str, offset: int) -> int:
        """Saves a consumer's offset (it only moves forward); returns the stored offset."""
        return self.db._hx().save_offset(consumer, self.topic, offset)

    def offset(self, consumer: str) -> int:
        """A consumer's saved offset, 0 if none yet."""
        return self.db._hx().offset(consumer, self.topic)

    def subscribe(self, consumer: Optional[str] = None, *, from_offset: Optional[int] = None,
                  batch: int = 100, autosave_every: Optional[int] = None,
                  autosave_interval: Optional[Duration] = None,
                  save_on_close: bool = True) -> "Subscription":
        """``for e in stream.subscribe(consumer="billing")`` / ``async for``: replays from
        the consumer's saved offset (or after ``from_offset``), then follows live. With
        autosave_every / autosave_interval the offset is saved as events are processed
        (at-least-once); save() saves it now. When the iteration ends (break, close(),
        the end of a ``with``) a named consumer's offset is saved -- the last event
        handed out -- unless save_on_close=False."""
        from .wake import Subscription
        if consumer is None and from_offset is None:
            raise InvalidArgument("give a consumer name or a from_offset")
        return Subscription(self.db, self.topic, consumer, from_offset, batch, autosave_every,
                            autosave_interval, save_on_close)

    def trim(self, *, max_age: Optional[Duration] = None, max_count: Optional[int] = None,
             below_consumers: bool = False) -> int:
        """Deletes events older than ``max_age``, beyond the newest ``max_count``, and/or
        (below_consumers=True) those every consumer has passed. Returns how many."""
        if max_count is not None:
            max_count = as_int(max_count, "max_count", 1)
        # (an explicit 0 would be "no such criterion" to the core: refused)
        age = 0 if max_age is None else duration_ms(max_age, "max_age", allow_zero=False)
        if not age and not max_count and not as_bool(below_consumers, "below_consumers"):  # the core's names max_age_ms
            raise InvalidArgument("trim needs max_age, max_count or below_consumers")
        return self.db._hx().trim(self.topic, age, max_count or 0, as_bool(below_consumers, "below_consumers"))
