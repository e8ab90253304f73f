"""Conversions shared by the package: durations, instants, JSON."""
from __future__ import annotations

import datetime as _dt
import json as _json
import operator as _operator
from typing import Any, Optional, Union

from ._tocsin import InvalidArgument

Duration = Union[float, int, _dt.timedelta]
"""A duration: seconds (int or float) or a datetime.timedelta."""
Instant = Union[float, int, _dt.datetime]
"""An instant: a datetime (naive means local time, as datetime.timestamp() reads it) or
seconds since the Unix epoch (as time.time() returns)."""

_MAX_MS = 2 ** 63 - 1  # the core's times and durations are int64 milliseconds


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


def _is_number(value: Any) -> bool:
    """A count of seconds: an int or float (numpy's numbers too: __index__ or a float
    subclass), never a bool."""
    return isinstance(value, float) or is_int_like(value)


def _seconds(value: Union[int, float], what: str) -> float:
    try:
        return float(value if isinstance(value, float) else _operator.index(value))
    except OverflowError:
        raise InvalidArgument("%s is out of range" % what) from None


_encode = _json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_decode = _json.loads


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


def duration_ms(value: Optional[Duration], what: str, *, allow_zero: bool = True) -> int:
    """Milliseconds of a duration given in seconds or as a timedelta (None: 0)."""
    if value is None:
        return 0
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif _is_number(value):
        seconds = _seconds(value, what)
    else:
        raise InvalidArgument("%s must be seconds (a number) or a timedelta, not %s"
                              % (what, type(value).__name__))
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise InvalidArgument("%s must be finite" % what)
    if seconds < 0 or (not allow_zero and seconds <= 0):
        raise InvalidArgument("%s must be %s" % (what, ">= 0" if allow_zero else "> 0"))
    if seconds * 1000 >= _MAX_MS:
        raise InvalidArgument("%s is out of range" % what)
    ms = int(round(seconds * 1000))
    if not allow_zero and ms < 1:
        ms = 1
    return ms


def instant_ms(value: Optional[Instant], what: str) -> int:
    """Milliseconds since the Unix epoch of a datetime or of seconds since the epoch."""
    if value is None:
        return 0
    if isinstance(value, _dt.datetime):
        seconds = value.timestamp()
    elif _is_number(value):
        seconds = _seconds(value, what)
    else:
        raise InvalidArgument("%s must be a datetime or seconds since the epoch, not %s"
                              % (what, type(value).__name__))
    if seconds != seconds or seconds <= 0 or seconds == float("inf"):
        raise InvalidArgument("%s must be a positive instant" % what)
    if seconds * 1000 >= _MAX_MS:
        raise InvalidArgument("%s is out of range" % what)
    return int(round(seconds * 1000))


def ms_datetime(ms: int) -> Optional[_dt.datetime]:
    """An aware UTC datetime of milliseconds since the epoch (None for 0)."""
    if not ms:
        return None
    return _dt.datetime.fromtimestamp(ms / 1000.0, tz=_dt.timezone.utc)
