import pytest

import tocsin
from conftest import T0, count


def test_publish_read_offsets(db):
    s = db.stream("orders")
    a = s.publish({"n": 1}, key="cust-1", meta={"trace": "t"})
    b, c = s.publish_many([{"n": 2}, {"n": 3}], keys=["cust-2", None])
    assert a < b < c
    events = s.read()
    assert [(e.offset, e.topic, e.key, e.payload) for e in events] == [
        (a, "orders", "cust-1", {"n": 1}), (b, "orders", "cust-2", {"n": 2}),
        (c, "orders", None, {"n": 3})]
    assert events[0].meta == {"trace": "t"} and events[1].meta is None
    assert [e.offset for e in s.read(after=a, limit=1)] == [b]
    assert s.offset("billing") == 0
    assert s.save_offset("billing", b) == b
    assert s.save_offset("billing", a) == b  # offsets only move forward
    assert s.offset("billing") == b
    assert db.stream("other").read() == []
    assert s.publish_many([]) == []


def test_stream_bad_input(db):
    s = db.stream("t")
    with pytest.raises(tocsin.InvalidArgument):
        db.stream("").publish(1)
    with pytest.raises(tocsin.InvalidArgument):
        s.publish(1, meta="no")
    with pytest.raises(tocsin.InvalidArgument):
        s.publish_many([1, 2], keys=["a"])
    with pytest.raises(tocsin.InvalidArgument, match=r"keys\[0\] must be a str or None, not int"):
        s.publish_many([1], keys=[5])
    with pytest.raises(tocsin.InvalidArgument):
        s.read(limit=0)
    with pytest.raises(tocsin.InvalidArgument):
        s.save_offset("", 1)
    with pytest.raises(tocsin.InvalidArgument):
        s.trim(max_count=0)
    assert count(db, "_tocsin_events") == 0


def test_trim(clocked):
    db = clocked
    s = db.stream("t")
    offs = s.publish_many(list(range(10)))
    assert s.trim(max_count=6) == 4
    db.set_time(T0 + 10_000)
    s.publish("new")
    assert s.trim(max_age=5) == 6
    assert [e.payload for e in s.read()] == ["new"]
    s.save_offset("c1", offs[-1] + 1)
    assert s.trim(below_consumers=True) == 1


def test_notify_read_prune(clocked):
    db = clocked
    start = db.notify_max_id()
    a = db.notify("chan", {"x": 1}, meta={"from": "test"})
    b = db.notify("chan", [2])
    db.notify("other", None)
    assert db.notify_max_id() > b > a > start
    got = db.notifications("chan", after_id=start)
    assert [(n.id, n.channel, n.payload) for n in got] == [(a, "chan", {"x": 1}), (b, "chan", [2])]
    assert got[0].meta == {"from": "test"}
    assert db.prune_notifications(max_keep=1) == 1
    db.set_time(T0 + 60_000)
    assert db.prune_notifications(max_age=30) == 2
    with pytest.raises(tocsin.InvalidArgument):
        db.notify("", 1)
    with pytest.raises(tocsin.InvalidArgument):
        db.prune_notifications(max_keep=-1)
    db.set_notify_autotrim(max_keep=5, one_in=1)
    for i in range(20):
        db.notify("auto", i)
    assert count(db, "_tocsin_notifications", "channel = 'auto'") == 5
    db.set_notify_autotrim(one_in=0)


def test_named_consumer_saves_its_offset_when_iteration_ends(db):
    s = db.stream("orders")
    offs = s.publish_many(list(range(10)))
    for e in s.subscribe(consumer="billing"):  # break: the offset of the last event handed out
        if e.payload == 3:
            break
    assert s.offset("billing") == offs[3]
    with s.subscribe(consumer="billing") as sub:  # with: replays after it, saves at the end
        assert [e.payload for e in sub.get(0)] == [4, 5, 6, 7, 8, 9]
    assert s.offset("billing") == offs[9]
    sub = s.subscribe(consumer="audit", save_on_close=False)  # told otherwise
    assert next(iter(sub)).payload == 0
    sub.close()
    assert s.offset("audit") == 0

    async def consume():
        async with s.subscribe(consumer="async") as sub:
            async for e in sub:
                if e.payload == 1:
                    break

    import asyncio
    asyncio.run(consume())
    assert s.offset("async") == offs[1]


def test_an_exception_in_the_with_block_does_not_count_the_event_being_processed(db):
    import asyncio
    s = db.stream("orders")
    offs = s.publish_many(list(range(10)))
    for batch, failing in ((100, 3), (1, 5), (3, 6), (4, 0)):  # mid-batch, batch of one, first of a batch
        consumer = "c%d_%d" % (batch, failing)
        with pytest.raises(ValueError):
            with s.subscribe(consumer=consumer, batch=batch) as sub:
                for e in sub:
                    if e.payload == failing:
                        raise ValueError("handler failed on %d" % e.payload)
        # the event that failed comes again: the offset is the one before it
        assert s.offset(consumer) == (offs[failing - 1] if failing else 0)
        with s.subscribe(consumer=consumer, batch=batch) as sub:
            assert next(iter(sub)).payload == failing
    # a break still counts the event it stopped at
    with s.subscribe(consumer="b") as sub:
        for e in sub:
            if e.payload == 2:
                break
    assert s.offset("b") == offs[2]
    # a batch taken with get() is handed out whole: an exception after it keeps it
    with pytest.raises(KeyError):
        with s.subscribe(consumer="g") as sub:
            sub.get(0)
            raise KeyError("after get")
    assert s.offset("g") == offs[9]

    async def consume():
        async with s.subscribe(consumer="async", batch=4) as sub:
            async for e in sub:
                if e.payload == 5:
                    raise RuntimeError("async handler failed")

    with pytest.raises(RuntimeError):
        asyncio.run(consume())
    assert s.offset("async") == offs[4]


def test_an_exception_raised_by_the_iteration_itself_keeps_the_event_the_body_finished(db):
    # the body finished its event and asked for the next one: an exception raised there
    # (an interrupt landing in the read, after the core handed the next batch over or
    # while it waited) is not the body's, so that event counts; the with block ends
    # with that exception (it raised a rewind error instead and left the subscription open)
    s = db.stream("iter-raised")
    offs = s.publish_many(list(range(6)))

    def interrupted(row):
        raise KeyboardInterrupt

    for batch in (3, 1):  # the event is the last of its batch: the next is read
        consumer = "c%d" % batch
        with pytest.raises(KeyboardInterrupt):
            with s.subscribe(consumer=consumer, batch=batch) as sub:
                for e in sub:
                    if e.payload == 2:
                        sub._make = interrupted  # the next read is interrupted
        assert sub.closed
        assert s.offset(consumer) == offs[2]

    async def consume():
        async with s.subscribe(consumer="async", batch=2) as sub:
            async for e in sub:
                if e.payload == 3:
                    sub._make = interrupted

    with pytest.raises(KeyboardInterrupt):
        import asyncio
        asyncio.run(consume())
    assert s.offset("async") == offs[3]


def test_a_batch_read_but_not_yet_buffered_is_not_saved(db):
    # a KeyboardInterrupt between the core's read of a batch and its buffering: close
    # saves the last event handed out (here: none yet, then the 4th), never the batch's end
    s = db.stream("interrupted")
    offs = s.publish_many(list(range(5)))

    def interrupted(row):
        raise KeyboardInterrupt

    sub = s.subscribe(consumer="c", batch=100)
    sub._make = interrupted  # the interrupt lands as the batch is buffered
    with pytest.raises(KeyboardInterrupt):
        next(iter(sub))
    del sub._make
    assert sub.position == 0
    sub.close()
    assert s.offset("c") == 0
    sub = s.subscribe(consumer="c", batch=100)
    it = iter(sub)
    assert [next(it).payload for _ in range(5)] == [0, 1, 2, 3, 4]
    sub.close()
    sub = s.subscribe(consumer="d", from_offset=offs[1], batch=2)
    assert sub.position == offs[1]
    it = iter(sub)
    assert [next(it).payload for _ in range(2)] == [2, 3]  # the whole first batch
    sub._make = interrupted  # the next batch's read, interrupted
    with pytest.raises(KeyboardInterrupt):
        next(it)
    del sub._make
    assert sub.position == offs[3]
    sub.close()
    assert s.offset("d") == offs[3]


def test_save_and_position_mid_batch_stop_at_the_last_event_handed_out(db):
    # the core hands out a batch of 100; the iterator hands on one event at a time:
    # save() and position mean the last event the caller got, not the batch's end
    s = db.stream("orders")
    offs = s.publish_many(list(range(10)))
    sub = s.subscribe(consumer="billing", batch=100, save_on_close=False)
    it = iter(sub)
    assert [next(it).payload for _ in range(3)] == [0, 1, 2]
    assert sub.position == offs[2]
    sub.save()
    assert s.offset("billing") == offs[2]  # was offs[9]: 3..9 skipped after a crash
    # the iteration goes on with the rest, each event once
    assert [next(it).payload for _ in range(7)] == [3, 4, 5, 6, 7, 8, 9]
    assert sub.position == offs[9]
    sub.save()
    assert s.offset("billing") == offs[9]
    sub.close()

    async def consume():
        got = []
        sub = s.subscribe(consumer="async", batch=100, save_on_close=False)
        async for e in sub:
            got.append(e.payload)
            if e.payload == 4:
                sub.save()
                assert s.offset("async") == offs[4]
            if e.payload == 9:
                break
        sub.close()
        return got

    import asyncio
    assert asyncio.run(consume()) == list(range(10))
    assert s.offset("async") == offs[4]


def test_a_save_at_close_that_fails_says_why(db):
    # the core's close of the subscription cleared its own error after the failed save:
    # the binding raised Busy with a message of its own that hid what failed and why
    s = db.stream("close-busy")
    s.publish_many([1, 2, 3])
    other = tocsin.open(db.path, busy_timeout=0.05)
    try:
        sub = other.stream("close-busy").subscribe("c", from_offset=0)
        assert len(sub.get(0)) == 3
        with db.transaction() as tx:  # holds the write lock
            s.publish(4, tx=tx)
            with pytest.raises(tocsin.Busy, match="locked") as e:
                sub.close()
            assert e.value.sqlite_code == 5
        assert s.offset("c") == 0
    finally:
        other.close()


def test_an_explicit_zero_prune_criterion_is_refused_and_nothing_is_deleted(db):
    for i in range(3):
        db.notify("c", i)
    s = db.stream("t")
    s.publish_many([1, 2, 3])
    for call, what in ((lambda: db.prune_notifications(max_keep=0), "max_keep must be an integer >= 1, not 0"),
                       (lambda: db.prune_notifications(max_age=0), "max_age must be > 0"),
                       (lambda: db.prune(notifications_max_keep=0), "notifications_max_keep must be"),
                       (lambda: db.prune(notifications_max_age=0.0), "notifications_max_age must be > 0"),
                       (lambda: db.set_notify_autotrim(max_age=60, max_keep=0), "max_keep must be"),
                       (lambda: s.trim(max_age=0, max_count=2), "max_age must be > 0"),
                       (lambda: s.trim(max_count=0), "max_count must be")):
        with pytest.raises(tocsin.InvalidArgument, match=what):
            call()
    assert len(db.notifications("c")) == 3
    assert len(s.read()) == 3
    assert db.prune_notifications(max_keep=1) == 2  # a real bound still prunes
