import threading
import time

import pytest

import tocsin
from conftest import count


@pytest.fixture
def app(db):
    db.executescript("CREATE TABLE orders(id INTEGER PRIMARY KEY, item TEXT)")
    return db


def test_commit_together(app):
    q, s = app.queue("q"), app.stream("orders")
    with app.transaction() as tx:
        assert tx.active and app.in_transaction
        app.execute("INSERT INTO orders(item) VALUES (?)", ["book"])
        jid = q.enqueue({"order": 1}, tx=tx)
        off = s.publish({"order": 1}, tx=tx)
        nid = app.notify("orders", {"order": 1}, tx=tx)
        ids = q.enqueue_many([1, 2], tx=tx)
    assert not tx.active and not app.in_transaction
    assert count(app, "orders") == 1
    assert q.get(jid) is not None and len(ids) == 2
    assert [e.offset for e in s.read()] == [off]
    assert [n.id for n in app.notifications("orders")] == [nid]


def test_rollback_drops_everything(app):
    q, s = app.queue("q"), app.stream("orders")
    with pytest.raises(RuntimeError):
        with app.transaction() as tx:
            app.execute("INSERT INTO orders(item) VALUES (?)", ["book"])
            q.enqueue({"order": 1}, tx=tx)
            s.publish({"order": 1}, tx=tx)
            app.notify("orders", 1, tx=tx)
            raise RuntimeError("payment declined")
    assert count(app, "orders") == 0
    assert count(app, "_tocsin_jobs") == 0
    assert s.read() == [] and app.notifications("orders") == []


def test_ack_with_business_write_is_one_commit(app):
    q = app.queue("q")
    q.enqueue({"item": "pen"})
    job = q.claim("w")
    with pytest.raises(KeyError):
        with app.transaction() as tx:
            app.execute("INSERT INTO orders(item) VALUES (?)", [job.payload["item"]])
            assert job.ack(tx=tx)
            raise KeyError("crash before commit")
    assert count(app, "orders") == 0
    assert q.get(job.id).state == "processing"  # the ack was rolled back too
    with app.transaction() as tx:
        app.execute("INSERT INTO orders(item) VALUES (?)", [job.payload["item"]])
        assert q.ack(job, tx=tx)
    assert count(app, "orders") == 1 and q.get(job.id) is None


def test_explicit_begin_commit_rollback(app):
    tx = app.transaction().begin()
    app.queue("q").enqueue(1, tx=tx)
    tx.rollback()
    tx2 = app.transaction().begin()
    app.queue("q").enqueue(2, tx=tx2)
    tx2.commit()
    assert [j.payload for j in app.queue("q").claim_batch(5, "w")] == [2]
    with pytest.raises(tocsin.InvalidArgument):
        tx2.commit()
    with pytest.raises(tocsin.InvalidArgument):
        tx2.begin().begin()
    tx2.rollback()


def test_bad_tx_arguments(app, path, tmp_path):
    q = app.queue("q")
    with app.transaction() as tx:
        pass
    with pytest.raises(tocsin.InvalidArgument, match="not open"):
        q.enqueue(1, tx=tx)
    with pytest.raises(tocsin.InvalidArgument, match="Transaction"):
        q.enqueue(1, tx="yes")
    other = tocsin.open(str(tmp_path / "other.db"))
    with other.transaction() as otx:
        with pytest.raises(tocsin.InvalidArgument, match="another database"):
            q.enqueue(1, tx=otx)
        with pytest.raises(tocsin.InvalidArgument):
            app.stream("s").publish(1, tx=otx)
        with pytest.raises(tocsin.InvalidArgument):
            app.notify("c", 1, tx=otx)
        with pytest.raises(tocsin.InvalidArgument):
            q.ack(1, 1, tx=otx)
    other.close()
    assert count(app, "_tocsin_jobs") == 0


def test_nested_transaction_rejected(app):
    with app.transaction():
        with pytest.raises(tocsin.InvalidArgument):
            app.transaction().begin()


def test_other_thread_waits_for_transaction(app):
    """A transaction keeps the handle for its thread: another thread's enqueue waits
    (GIL released) and does not join the transaction."""
    q = app.queue("q")
    done = threading.Event()

    def other():
        q.enqueue("from-thread")
        done.set()

    with pytest.raises(ValueError):
        with app.transaction() as tx:
            q.enqueue("in-tx", tx=tx)
            t = threading.Thread(target=other)
            t.start()
            time.sleep(0.2)  # the thread is blocked in the lock, not the GIL
            assert not done.is_set()
            raise ValueError("roll back")
    t.join(5)
    assert done.is_set()
    assert [j.payload for j in q.claim_batch(5, "w")] == ["from-thread"]


def test_tx_belongs_to_its_handle_not_a_thread(app):
    """(Changed with the core's thread model: a transaction is a core transaction
    handle, not a thread's.) Another thread joins it only by passing tx=; its calls
    without tx= run outside it."""
    q = app.queue("q")
    with pytest.raises(ValueError):
        with app.transaction() as tx:
            t = threading.Thread(target=lambda: q.enqueue("joined", tx=tx))
            t.start()
            t.join()
            assert app.execute("SELECT count(*) FROM _tocsin_jobs", None) == [(1,)]  # joins in this context
            raise ValueError("roll back")
    assert q.stats()["pending"] == 0


def test_contexts_have_their_own_transactions(app):
    """Implicit joining follows the context (contextvars): two asyncio tasks of one
    loop thread each see only their own transaction."""
    import asyncio
    q = app.queue("q")
    seen = {}

    async def a():
        with app.transaction():
            q.enqueue("a")
            await asyncio.sleep(0.05)
            seen["a"] = app.in_transaction
            raise ValueError("a rolls back")

    async def b():
        await asyncio.sleep(0.01)
        seen["b"] = app.in_transaction  # a's transaction is not b's
        return True

    async def main():
        return await asyncio.gather(a(), b(), return_exceptions=True)

    ra, rb = asyncio.run(main())
    assert isinstance(ra, ValueError) and rb is True
    assert seen == {"a": True, "b": False}
    assert q.stats()["pending"] == 0


def test_tasks_and_threads_started_inside_do_not_join(app):
    """A task created inside a transaction (asyncio.create_task) and a thread given a
    copy of its context (asyncio.to_thread) inherit its contextvars; they still run
    outside it: they do not see it, their jobs survive its rollback, and they may
    open transactions of their own."""
    import asyncio
    q = app.queue("q")
    seen = {}

    async def child(ended):
        seen["child"] = app.in_transaction
        await ended.wait()  # writing now would wait for the parent's write lock
        q.enqueue("child")

    async def child_tx(ended):
        await ended.wait()
        async with app.transaction() as tx:
            q.enqueue("child_tx", tx=tx)

    def in_thread():
        seen["thread"] = app.in_transaction

    async def main():
        ended = asyncio.Event()
        tasks = []
        with pytest.raises(ValueError):
            async with app.transaction():
                q.enqueue("parent")
                tasks = [asyncio.create_task(child(ended)), asyncio.create_task(child_tx(ended))]
                await asyncio.to_thread(in_thread)
                await asyncio.sleep(0.01)
                assert app.in_transaction
                raise ValueError("the parent rolls back")
        ended.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert seen == {"child": False, "thread": False}
    rows = app.execute("SELECT payload FROM _tocsin_jobs ORDER BY payload")
    assert rows == [('"child"',), ('"child_tx"',)]


def test_close_rolls_back_open_transaction(path):
    db = tocsin.open(path)
    tx = db.transaction().begin()
    db.queue("q").enqueue(1, tx=tx)
    db.close()
    with tocsin.open(path) as db2:
        assert db2.queue("q").stats()["pending"] == 0


def test_threads_share_one_database(db):
    q = db.queue("q")
    n_threads, per = 4, 200

    def work(k):
        for i in range(per):
            q.enqueue({"t": k, "i": i})

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert q.stats()["pending"] == n_threads * per
    seen = set()
    lock = threading.Lock()

    def drain():
        while True:
            job = q.claim("w")
            if job is None:
                return
            assert job.ack()
            with lock:
                seen.add(job.id)

    threads = [threading.Thread(target=drain) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == n_threads * per


def test_claim_and_ack_in_one_transaction(app):
    """claim(tx=) joins the transaction: claimed and acked together, the job is gone at
    the commit; a rollback puts it back, unclaimed, with its attempt undone."""
    q = app.queue("q1")
    first = q.enqueue("a")
    q.enqueue("b")
    with app.transaction() as tx:
        job = q.claim("w", tx=tx)
        assert job.id == first
        app.execute("INSERT INTO orders(item) VALUES (?)", [job.payload], )
        assert job.ack(tx=tx)
    assert q.get(first) is None
    with pytest.raises(RuntimeError):
        with app.transaction() as tx:
            [job] = q.claim_batch(5, "w", tx=tx)
            raise RuntimeError("handler failed")
    again = q.claim("w")
    assert again.payload == "b" and again.attempts == 1
    other = tocsin.open(app.path)
    try:
        with other.transaction() as otx:
            with pytest.raises(tocsin.InvalidArgument, match="another database"):
                q.claim("w", tx=otx)
            with pytest.raises(tocsin.InvalidArgument, match="another database"):
                q.claim_batch(2, "w", tx=otx)
    finally:
        other.close()
    assert count(app, "orders") == 1


@pytest.mark.parametrize("sql", ["BEGIN", "BEGIN IMMEDIATE", "COMMIT", "END", "ROLLBACK", "SAVEPOINT a"])
def test_sql_transaction_control_is_refused(app, sql):
    # the shared handle: a BEGIN would pull every thread's calls into it
    with pytest.raises(tocsin.InvalidArgument, match="may not begin or end a transaction"):
        app.execute(sql)
    with pytest.raises(tocsin.InvalidArgument, match="may not begin or end a transaction"):
        app.executescript("INSERT INTO orders(item) VALUES ('a'); " + sql)
    assert not app.in_transaction
    assert count(app, "orders") == 1  # statement by statement: the INSERT before it ran
    # inside db.transaction(): it cannot be ended behind its back (a SAVEPOINT
    # inside it is the app's)
    with app.transaction() as tx:
        app.execute("INSERT INTO orders(item) VALUES ('b')")
        if sql != "SAVEPOINT a":
            with pytest.raises(tocsin.InvalidArgument):
                app.execute(sql)
            with pytest.raises(tocsin.InvalidArgument):
                tx.execute(sql)
        assert tx.active
        app.queue("q").enqueue(1, tx=tx)
    assert count(app, "orders") == 2 and app.queue("q").stats()["pending"] == 1


def test_savepoints_inside_a_transaction_are_the_apps(app):
    with app.transaction() as tx:
        app.executescript("SAVEPOINT a; INSERT INTO orders(item) VALUES ('x'); ROLLBACK TO a; "
                          "INSERT INTO orders(item) VALUES ('y'); RELEASE a")
        assert tx.active
    assert [r[0] for r in app.execute("SELECT item FROM orders")] == ["y"]


def test_cancelled_async_begin_stops_waiting_for_the_lock(path):
    """A task cancelled while its ``async with db.transaction()`` waits for another
    connection's write lock (asyncio.wait_for, a timeout) ends that wait too: the
    pool's thread returns (Interrupted, nothing begun) while the lock is still held,
    instead of waiting out the busy timeout and then beginning a transaction nobody
    ends."""
    import asyncio
    import concurrent.futures
    from tocsin import db as dbmod

    class Recording(concurrent.futures.ThreadPoolExecutor):
        futures = []

        def submit(self, *a, **kw):
            f = super().submit(*a, **kw)
            self.futures.append(f)
            return f

    db = tocsin.open(path, busy_timeout=600)  # a wait not cut short would hang here
    holder = tocsin.open(path)
    saved, dbmod._pool = dbmod._pool, Recording(max_workers=2)
    try:
        with holder.transaction() as htx:
            holder.queue("q").enqueue(1, tx=htx)

            async def begin():
                async with db.transaction() as tx:
                    db.queue("q").enqueue("never", tx=tx)

            async def main():
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(begin(), 0.05)

            asyncio.run(main())
            (fut,) = Recording.futures
            with pytest.raises(tocsin.Interrupted, match="cancelled while this call waited"):
                fut.result(timeout=60)  # returned while the holder still has the lock
        with db.transaction() as tx:  # the lock is free again: nothing was left begun
            db.queue("q").enqueue(2, tx=tx)
        assert [j.payload for j in db.queue("q").claim_batch(5, "w")] == [1, 2]
    finally:
        dbmod._pool.shutdown()
        dbmod._pool = saved
        holder.close()
        db.close()
