"""Command line: ``python -m tocsin worker module:db --queue emails --concurrency 4``."""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import logging
import os
import sys
import time
from typing import Any, List, Optional


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, event and the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 6), "level": record.levelname.lower(),
               "event": record.getMessage(), "pid": os.getpid()}
        out.update(getattr(record, "tocsin", {}) or {})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def load_target(spec: str) -> Any:
    """The Database named by "module:attribute" (a Database or a callable making one)."""
    from .db import Database
    if ":" not in spec:
        raise SystemExit("tocsin: the target must be module:attribute (e.g. myapp.jobs:db), not %r" % spec)
    mod_name, attr = spec.split(":", 1)
    sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name and mod_name.split(".")[0] == e.name.split(".")[0]:
            raise SystemExit("tocsin: cannot import %r: %s (run from the folder that holds it, "
                             "or set PYTHONPATH)" % (mod_name, e))
        raise  # a missing module imported by the target itself: show where
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SystemExit("tocsin: %s has no attribute %r" % (mod_name, part))
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, Database):
        # a factory is called without arguments: one that needs some (or a function
        # named by mistake, json:dumps) raised a bare TypeError traceback
        try:
            inspect.signature(obj).bind()
        except TypeError as e:
            raise SystemExit("tocsin: %s is a callable that needs arguments (%s); the target must be "
                             "a tocsin.Database or a callable that makes one from none" % (spec, e))
        except ValueError:  # no signature to read (some builtins): call it and see
            pass
        obj = obj()
    if not isinstance(obj, Database):
        raise SystemExit("tocsin: %s is not a tocsin.Database" % spec)
    return obj


def main(argv: Optional[List[str]] = None) -> int:
    from . import __version__
    p = argparse.ArgumentParser(prog="python -m tocsin", description="tocsin command line")
    p.add_argument("--version", action="version", version="tocsin " + __version__)
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("worker", help="run the tasks of a module's queues")
    w.add_argument("target", help="module:attribute naming the tocsin.Database the tasks are registered on")
    w.add_argument("--queue", "-q", action="append", dest="queues",
                   help="queue to work (repeatable; default: every queue with registered tasks)")
    w.add_argument("--concurrency", "-c", type=int, default=1)
    w.add_argument("--visibility", type=float, default=30.0, help="lease per claim, seconds")
    w.add_argument("--shutdown-timeout", type=float, default=30.0,
                   help="seconds running jobs get to finish on SIGINT/SIGTERM before they are handed back")
    w.add_argument("--worker-id", default=None)
    w.add_argument("--no-scheduler", action="store_true", help="do not run the scheduler")
    w.add_argument("--scheduler-ttl", type=float, default=10.0, help="leader lease, seconds")
    w.add_argument("--log-level", default="info", type=str.lower,
                   choices=["debug", "info", "warning", "error", "critical"])
    args = p.parse_args(argv)

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("tocsin")
    root.addHandler(handler)
    root.setLevel(args.log_level.upper())

    from .worker import Worker
    db = load_target(args.target)
    queues = args.queues or [name for name, q in db._queues.items() if q._tasks]
    if not queues:
        raise SystemExit("tocsin: no --queue given and no task registered on %s" % args.target)
    from ._tocsin import InvalidArgument
    try:
        worker = Worker(db, queues, concurrency=args.concurrency, worker_id=args.worker_id,
                        visibility=args.visibility, shutdown_timeout=args.shutdown_timeout,
                        scheduler=not args.no_scheduler, scheduler_ttl=args.scheduler_ttl)
    except InvalidArgument as e:  # a bad option: said as the other command-line errors are
        raise SystemExit("tocsin: %s" % e) from None
    worker.run()
    db.close()
    import threading
    if any(t.name.startswith("tocsin-task") and t.is_alive() for t in threading.enumerate()):
        # A sync task outlived the shutdown deadline: its job was handed back, and a
        # Python thread cannot be killed, so leave without joining it.
        logging.shutdown()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
