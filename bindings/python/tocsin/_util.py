"""Conversions shared by the package: durations, instants, JSON."""
from __future__ import annotations

import datetime as _dt
import json as _json
import operator as _operator
import sys as _sys
import threading as _threading
from typing import Any, Iterator, List, Optional, Union

from ._tocsin import MAX_LEASE_MS, MAX_TIME_MS, Error, InvalidArgument, sqlite_copies

Duration = Union[float, int, _dt.timedelta]
"""A duration: seconds (int or float) or a datetime.timedelta."""
Instant = Union[float, int, _dt.datetime]
"""An instant: a datetime (naive means local time, as datetime.timestamp() reads it) or
seconds since the Unix epoch (as time.time() returns)."""

# MAX_LEASE_MS: the core's bound of a lock's ttl and a rate limit's window (366 days),
# checked here (lease_ms) so that the message is in seconds.


def is_int_like(value: Any) -> bool:
    """An int, an int subclass or an object with __index__ (numpy's integers); not a bool."""
    return not isinstance(value, bool) and hasattr(type(value), "__index__")


def as_int(value: Any, what: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    """An integer argument as an int: an int, an int subclass (IntEnum) or an object with
    __index__ (numpy's integers); never a bool (True is not 1) nor a float (never
    truncated). lo/hi bound it; the error names the argument and what it got."""
    want = ("an integer" if lo is None and hi is None else
            "an integer >= %d" % lo if hi is None else
            "an integer <= %d" % hi if lo is None else "an integer from %d to %d" % (lo, hi))
    if not is_int_like(value):
        raise InvalidArgument("%s must be %s, not %s" % (what, want, type(value).__name__))
    v = _operator.index(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise InvalidArgument("%s must be %s, not %d" % (what, want, v))
    return v


def items(value: Any, what: str, kind: str) -> Iterator[Any]:
    """An iterator over a list argument (``what``, a list of ``kind``). A str, bytes or
    dict (not its characters, nor its keys) and a value that is no collection at all
    (None, 5) are refused naming the argument."""
    if isinstance(value, (str, bytes, bytearray, dict)):
        raise InvalidArgument("%s must be a list of %s, not a %s (write [%r])"
                              % (what, kind, type(value).__name__, value))
    try:
        return iter(value)
    except TypeError:
        raise InvalidArgument("%s must be a list of %s, not %s"
                              % (what, kind, type(value).__name__)) from None


def _is_number(value: Any) -> bool:
    """A count of seconds: an int or float (numpy's numbers too: __index__ or a float
    subclass), never a bool."""
    return isinstance(value, float) or is_int_like(value)


_encode_flat = _json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_decode_flat = _json.loads

# The core stores arrays and objects nested up to 1000 deep (payloads, meta, results,
# task arguments: any runtime may write that deep). json's encoder and decoder count
# each level against the interpreter's recursion limit (1000 by default, of which the
# caller's own frames already take some), so a value near the core's bound raised
# RecursionError: a payload another runtime wrote 999 deep could not be read, nor a
# task's result returned. On RecursionError the call is made again once with the limit
# raised by enough for the core's bound (one level at a time, under a lock; the limit
# is the interpreter's, put back at once). A value deeper than that still fails there
# (the core would refuse it anyway).
# The limit is the process's: another thread may set it meanwhile (the application's
# own setting, or a library raising it as this does). The old limit is put back only
# while the limit is still the one raised here; a value set meanwhile stays (putting
# the old one back overwrote it, and a thread deep in a recursion that relied on it
# raised RecursionError). The lock is re-entrant: a value's own code (a dict subclass's
# items()) may call dumps again while it is being written. (From Python 3.12, json's C
# encoder and decoder count C levels, not the recursion limit: 1000 levels pass at once.)
_NEST_ROOM = 1000 + 100
_deep_lock = _threading.RLock()


def _deep(fn: Any, arg: Any) -> Any:
    try:
        return fn(arg)
    except RecursionError:
        pass
    with _deep_lock:
        old = _sys.getrecursionlimit()
        raised = old + _NEST_ROOM
        _sys.setrecursionlimit(raised)
        try:
            return fn(arg)
        finally:
            if _sys.getrecursionlimit() == raised:
                _sys.setrecursionlimit(old)


def _encode(value: Any) -> str:
    return _deep(_encode_flat, value)


def _decode(text: str) -> Any:
    """JSON text the core handed out -> a Python value, at any depth the core stores."""
    return _deep(_decode_flat, text)


def at_item(e: Exception, label: str, i: int, n: int) -> Exception:
    """An argument error of item i of n, naming it ("job 3: ...") when there are
    several, as the core does for the checks it makes itself."""
    return type(e)("%s %d: %s" % (label, i, e)) if n > 1 else e


def dumps_each(values: List[Any], label: str) -> List[str]:
    """dumps of every payload of a batch, a refusal naming which (``label`` i)."""
    out = []
    for i, v in enumerate(values):
        try:
            out.append(dumps(v))
        except InvalidArgument as e:
            raise at_item(e, label, i, len(values)) from None
    return out


def dumps(value: Any, what: str = "payload") -> str:
    """JSON text of a value (compact; NaN and infinities are rejected)."""
    try:
        return _encode(value)
    except ValueError as e:
        if str(e).startswith("Out of range float"):
            raise InvalidArgument("%s is not JSON-serialisable: NaN and infinities have no JSON "
                                  "form (only finite numbers do)" % what) from None
        raise InvalidArgument("%s is not JSON-serialisable: %s" % (what, e)) from None
    except TypeError as e:
        raise InvalidArgument("%s is not JSON-serialisable: %s" % (what, e)) from None
    except RecursionError:
        raise InvalidArgument("%s is not JSON-serialisable: nested too deeply" % what) from None


def loads(text: Optional[str]) -> Any:
    return None if text is None else _decode(text)


def meta_json(meta: Optional[dict]) -> Optional[str]:
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise InvalidArgument("meta must be a dict (a JSON object of headers)")
    return dumps(meta, "meta")


def _seconds_text(ms: int) -> str:
    """Milliseconds as seconds for a message: 253402300799.999, 31622400, 0.003."""
    s, frac = divmod(ms, 1000)
    return "%d" % s if not frac else ("%d.%03d" % (s, frac)).rstrip("0")


def _shown(value: Any) -> str:
    """A number as the caller wrote it, for a message (not 400 digits of it)."""
    if isinstance(value, float):
        return repr(float(value))
    text = str(_operator.index(value))
    return text if len(text) <= 24 else "%s.%se+%d" % (text[0], text[1:4], len(text) - 1)


def _ms(value: Any) -> Union[int, float]:
    """Milliseconds of a count of seconds: exact for integers (any size), a float for floats."""
    return float(value) * 1000.0 if isinstance(value, float) else _operator.index(value) * 1000


def _too_big(what: str, value: str, max_ms: int, note: str) -> InvalidArgument:
    return InvalidArgument("%s must be at most %s s %s, not %s"
                           % (what, _seconds_text(max_ms), note, value))


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or value - value == 0.0  # not NaN nor an infinity


def duration_ms(value: Optional[Duration], what: str, *, allow_zero: bool = True,
                min_ms: int = 0, max_ms: int = MAX_TIME_MS, max_note: str = "about 8030 years") -> int:
    """Milliseconds of a duration given in seconds or as a timedelta (None: 0). The
    bounds are checked here, in seconds and naming ``what``: the core's messages name
    its C argument (delay_ms) in milliseconds. max_ms is the core's bound
    (TOCSIN_MAX_TIME_MS unless the call has a tighter one), min_ms a core minimum
    above 1 ms."""
    if value is None:
        return 0
    ms: Union[int, float]
    if isinstance(value, _dt.timedelta):
        ms, shown = value.total_seconds() * 1000.0, str(value)
    elif _is_number(value):
        if not _finite(value):
            raise InvalidArgument("%s must be finite" % what)
        ms, shown = _ms(value), _shown(value) + " s"
    else:
        raise InvalidArgument("%s must be seconds (a number) or a timedelta, not %s"
                              % (what, type(value).__name__))
    if ms < 0 or (not allow_zero and ms <= 0):
        raise InvalidArgument("%s must be %s" % (what, ">= 0" if allow_zero else "> 0"))
    if ms > max_ms or round(ms) > max_ms:
        raise _too_big(what, shown, max_ms, "(%s)" % max_note)
    ms = int(round(ms))
    if not allow_zero and ms < 1:
        ms = 1
    if ms < min_ms:
        raise InvalidArgument("%s must be at least %s s, not %s" % (what, _seconds_text(min_ms), shown))
    return ms


def lease_ms(value: Optional[Duration], what: str, *, min_ms: int = 0) -> int:
    """Milliseconds of a lock's ttl or a rate limit's window: > 0, at most 366 days."""
    return duration_ms(value, what, allow_zero=False, min_ms=min_ms, max_ms=MAX_LEASE_MS,
                       max_note="366 days")


_MAX_TIME_TEXT = (_dt.datetime(1970, 1, 1) + _dt.timedelta(milliseconds=MAX_TIME_MS)).isoformat(
    sep=" ", timespec="milliseconds") + " UTC"


def instant_ms(value: Optional[Instant], what: str) -> int:
    """Milliseconds since the Unix epoch of a datetime or of seconds since the epoch,
    at most the core's TOCSIN_MAX_TIME_MS (checked here: the core's message names its
    C argument in milliseconds)."""
    if value is None:
        return 0
    ms: Union[int, float]
    if isinstance(value, _dt.datetime):
        try:
            ms = value.timestamp() * 1000.0
        except (OverflowError, ValueError, OSError):
            raise InvalidArgument("%s must be at most %s, not %s" % (what, _MAX_TIME_TEXT, value)) from None
    elif _is_number(value):
        ms = _ms(value)
    else:
        raise InvalidArgument("%s must be a datetime or seconds since the epoch, not %s"
                              % (what, type(value).__name__))
    if not _finite(value) or ms != ms or ms <= 0:
        raise InvalidArgument("%s must be a positive instant" % what)
    if ms > MAX_TIME_MS or round(ms) > MAX_TIME_MS:
        if isinstance(value, _dt.datetime):
            raise InvalidArgument("%s must be at most %s, not %s" % (what, _MAX_TIME_TEXT, value))
        raise _too_big(what, _shown(value), MAX_TIME_MS, "since the epoch (%s)" % _MAX_TIME_TEXT)
    return int(round(ms))


def ms_datetime(ms: int) -> Optional[_dt.datetime]:
    """An aware UTC datetime of milliseconds since the epoch (None for 0)."""
    if not ms:
        return None
    return _dt.datetime.fromtimestamp(ms / 1000.0, tz=_dt.timezone.utc)


def as_bool(value: Any, what: str) -> bool:
    """A flag: True or False only. A truthy string ("no", "false") would turn it on."""
    if not isinstance(value, bool):
        raise InvalidArgument("%s must be True or False, not %r" % (what, value))
    return value


def check_one_sqlite(allowed: Any) -> None:
    """One SQLite per process (docs/architecture.md, "Python"): the core names a second
    copy of SQLite loaded in the process; refused unless the caller says that copy never
    opens tocsin's file."""
    if as_bool(allowed, "allow_other_sqlite"):
        return
    msg = sqlite_copies()
    if msg is not None:
        raise Error(msg + ". tocsin runs on the system's libsqlite3: use a Python whose sqlite3 "
                    "module links it too (Debian's python3, a pyenv build), or pass "
                    "allow_other_sqlite=True if the other copy never opens this database file")
