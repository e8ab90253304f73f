import json
import os
import sqlite3

import pytest

import tocsin
from conftest import LOADS_EXTENSIONS


def test_loadable_path():
    p = tocsin.loadable_path()
    assert os.path.isfile(p) and os.path.basename(p).startswith("tocsin.")


def test_load_into_stdlib_sqlite3(path):
    conn = sqlite3.connect(path)
    tocsin.load(conn)
    assert conn.execute("SELECT tocsin_version()").fetchone()[0] == tocsin.core_version()
    if LOADS_EXTENSIONS:  # loading is switched off again afterwards
        with pytest.raises(sqlite3.OperationalError):
            conn.load_extension(tocsin.loadable_path())
    jid = conn.execute("SELECT tocsin_enqueue('emails', ?, ?)",
                       [json.dumps({"to": "x"}), json.dumps({"priority": 2})]).fetchone()[0]
    conn.commit()
    with tocsin.open(path) as db:
        job = db.queue("emails").claim("py-worker")
        assert (job.id, job.payload, job.priority) == (jid, {"to": "x"}, 2)
        db.queue("emails").enqueue({"to": "y"})
        claimed = json.loads(conn.execute("SELECT tocsin_claim('emails', 'sql-worker', 5, 30000)").fetchone()[0])
        assert [j["payload"] for j in claimed] == [{"to": "y"}]
        assert conn.execute("SELECT tocsin_ack(?, ?)", [claimed[0]["id"], claimed[0]["token"]]).fetchone()[0] == 1
        assert job.ack()
        assert db.queue("emails").stats()["pending"] == 0
    conn.close()


def test_sql_rollback_in_stdlib_transaction(path):
    conn = sqlite3.connect(path)
    tocsin.load(conn)
    conn.execute("CREATE TABLE t(x)")
    conn.commit()
    conn.execute("INSERT INTO t VALUES (1)")  # the stdlib module opens a transaction here
    conn.execute("SELECT tocsin_enqueue('q', '1')")
    conn.rollback()
    with tocsin.open(path) as db:
        assert db.queue("q").stats()["pending"] == 0
    conn.close()


def test_load_without_extension_support_is_a_clear_error():
    class NoExtensions:  # a DBAPI connection that can neither load nor be reached
        def execute(self, *a):
            raise AssertionError

        def cursor(self):
            raise AssertionError

    with pytest.raises(tocsin.Error, match="cannot load SQLite extensions .*NoExtensions is no sqlite3.Connection"):
        tocsin.load(NoExtensions())
    with pytest.raises(TypeError):
        tocsin.load(42)


def test_a_bad_connection_is_refused_naming_the_call_made():
    # tocsin.enqueue(None, ...) said "tocsin.load() needs a sqlite3.Connection ...": a call
    # the user had not made (and an Engine, which only load takes)
    with pytest.raises(TypeError, match=r"^tocsin\.load\(\) needs .*Session or Engine, not int"):
        tocsin.load(42)
    calls = {"tocsin.enqueue": lambda c: tocsin.enqueue(c, "q", {}),
             "tocsin.call": lambda c: tocsin.call(c, "q", "t", []),
             "tocsin.publish": lambda c: tocsin.publish(c, "t", {}),
             "tocsin.notify": lambda c: tocsin.notify(c, "ch", {})}
    for name, f in calls.items():
        with pytest.raises(TypeError) as e:
            f(None)
        assert str(e.value) == ("%s() needs a sqlite3.Connection or an SQLAlchemy Connection "
                                "or Session, not NoneType" % name)


sqlalchemy = pytest.importorskip("sqlalchemy")


def test_sqlalchemy_session_enqueue_in_orm_transaction(path):
    from sqlalchemy import Column, Integer, String, create_engine, text
    from sqlalchemy.orm import Session, declarative_base

    Base = declarative_base()

    class Order(Base):
        __tablename__ = "orders"
        id = Column(Integer, primary_key=True)
        item = Column(String)

    engine = create_engine("sqlite:///" + path)
    tocsin.load(engine)  # every pooled connection gets the functions
    Base.metadata.create_all(engine)

    with Session(engine) as session:
        order = Order(item="book")
        session.add(order)
        session.flush()
        session.execute(text("SELECT tocsin_enqueue('orders', json_object('order_id', :id))"),
                        {"id": order.id})
        session.commit()

    with Session(engine) as session:  # a rollback drops the job with the row
        session.add(Order(item="pen"))
        session.flush()
        session.execute(text("SELECT tocsin_enqueue('orders', '{\"order_id\": 99}')"))
        session.rollback()

    with Session(engine) as session:  # load() on a Session reaches its DBAPI connection
        tocsin.load(session)
        assert session.execute(text("SELECT tocsin_version()")).scalar() == tocsin.core_version()

    with tocsin.open(path) as db:
        q = db.queue("orders")
        job = q.claim("tocsin-worker")
        assert job.payload == {"order_id": 1}
        with db.transaction() as tx:
            db.execute("UPDATE orders SET item = item || ' (shipped)' WHERE id = ?", [job.payload["order_id"]])
            assert job.ack(tx=tx)
        assert q.claim("tocsin-worker") is None
        assert db.execute("SELECT item FROM orders") == [("book (shipped)",)]
    engine.dispose()


def test_app_connection_helpers_refuse_outside_a_transaction(path):
    """The trial: "enqueue first, then rollback" sent a receipt for a rolled-back order,
    because sqlite3 opens no transaction before a SELECT. The helpers refuse."""
    conn = sqlite3.connect(path)
    tocsin.load(conn)
    conn.execute("CREATE TABLE orders(id INTEGER PRIMARY KEY)")
    conn.commit()
    with pytest.raises(tocsin.InvalidArgument, match="no transaction is open"):
        tocsin.call(conn, "emails", "send_receipt", [1])
    with pytest.raises(tocsin.InvalidArgument, match="no transaction is open"):
        tocsin.enqueue(conn, "emails", {"order": 1})
    # the safe pattern: BEGIN (or the business write) first, then enqueue, then commit
    conn.execute("BEGIN")
    jid = tocsin.call(conn, "emails", "send_receipt", [1], {"copy": True}, priority=3)
    conn.execute("INSERT INTO orders(id) VALUES (1)")
    conn.rollback()  # the order is rolled back: so is its receipt
    with tocsin.open(path) as db:
        assert db.queue("emails").get(jid) is None
    conn.execute("INSERT INTO orders(id) VALUES (2)")  # opens the transaction
    jid = tocsin.call(conn, "emails", "send_receipt", [2], {"copy": True}, priority=3)
    conn.commit()
    jid2 = tocsin.enqueue(conn, "emails", {"raw": 1}, autocommit=True)  # told: commits alone
    with tocsin.open(path) as db:
        job = db.queue("emails").get(jid)
        assert job.payload == {"task": "send_receipt", "args": [2], "kwargs": {"copy": True}}
        assert job.priority == 3 and db.queue("emails").get(jid2).payload == {"raw": 1}
    conn.close()


def test_app_connection_helpers_with_sqlalchemy(path):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    engine = sqlalchemy.create_engine("sqlite:///" + path)
    tocsin.load(engine)
    with engine.connect() as c:
        c.execute(sqlalchemy.text("CREATE TABLE orders(id INTEGER PRIMARY KEY)"))
        c.commit()
    with pytest.raises(RuntimeError):
        with engine.begin() as c:  # SQLAlchemy's transaction: the job joins it
            jid = tocsin.enqueue(c, "emails", {"order": 1})
            c.execute(sqlalchemy.text("INSERT INTO orders(id) VALUES (1)"))
            raise RuntimeError("payment declined")
    with tocsin.open(path) as db:
        assert db.queue("emails").get(jid) is None
    with engine.begin() as c:
        jid = tocsin.enqueue(c, "emails", {"order": 2})
    with tocsin.open(path) as db:
        assert db.queue("emails").get(jid).payload == {"order": 2}
    # "commit as you go" (SQLAlchemy 2.x): the job, first, begins the transaction that
    # the connection's next statement would; commit() keeps both, rollback() drops both
    with engine.connect() as c:
        tocsin.enqueue(c, "emails", {"order": 3})
        c.execute(sqlalchemy.text("INSERT INTO orders(id) VALUES (3)"))
        c.rollback()
        jid4 = tocsin.enqueue(c, "emails", {"order": 4})
        c.execute(sqlalchemy.text("INSERT INTO orders(id) VALUES (4)"))
        c.commit()
    with tocsin.open(path) as db:
        # (the rolled-back job's id was never committed: job 4 may have it)
        assert db.queue("emails").get(jid4).payload == {"order": 4}
        assert db.queue("emails").stats()["pending"] == 2  # orders 2 and 4
        assert [r[0] for r in db.execute("SELECT id FROM orders")] == [4]
    engine.dispose()


def test_sqlalchemy_commit_as_you_go_with_a_begin_listener_and_under_autocommit(path):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy import event, text
    # SQLAlchemy's recipe for pysqlite: the driver's own BEGIN off, a "begin" listener
    # emits it. The job's begin() ran the listener's BEGIN; the job then sent a second
    # one ("cannot start a transaction within a transaction")
    engine = sqlalchemy.create_engine("sqlite:///" + path)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, record):
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN")

    tocsin.load(engine)
    with engine.connect() as c:
        c.execute(text("CREATE TABLE orders(id INTEGER PRIMARY KEY)"))
        c.commit()
        jid = tocsin.enqueue(c, "emails", {"order": 1})
        c.execute(text("INSERT INTO orders(id) VALUES (1)"))
        c.commit()
        tocsin.enqueue(c, "emails", {"order": 2})
        c.rollback()
    with tocsin.open(path) as db:
        assert db.queue("emails").get(jid).payload == {"order": 1}
        assert db.queue("emails").stats()["pending"] == 1
    engine.dispose()
    # AUTOCOMMIT: each statement commits by itself and nothing commits a transaction.
    # The job began one all the same, which took in the statements after it and was
    # rolled back when the connection was returned: the job and those rows were lost.
    # Refused, as on any connection outside a transaction (autocommit=True: on its own)
    for engine, connect in (
            (sqlalchemy.create_engine("sqlite:///" + path),
             lambda e: e.connect().execution_options(isolation_level="AUTOCOMMIT")),
            (sqlalchemy.create_engine("sqlite:///" + path, isolation_level="AUTOCOMMIT"),
             lambda e: e.connect())):
        tocsin.load(engine)
        with connect(engine) as c:
            with pytest.raises(tocsin.InvalidArgument, match="no transaction is open"):
                tocsin.enqueue(c, "emails", {"order": 3})
            assert not c.in_transaction()
            c.execute(text("INSERT INTO orders(id) VALUES (3)"))  # commits by itself
            jid = tocsin.enqueue(c, "emails", {"order": 4}, autocommit=True)
        with tocsin.open(path) as db:
            assert db.queue("emails").get(jid).payload == {"order": 4}
            assert [r[0] for r in db.execute("SELECT id FROM orders ORDER BY id")] == [1, 3]
            db.execute("DELETE FROM orders WHERE id = 3")
        engine.dispose()


def test_app_connection_helpers_refuse_bad_values_as_invalid_argument(path):
    # they reached the SQL functions and came back as sqlite3 errors of assorted classes
    # (IntegrityError, InterfaceError, UnicodeEncodeError), or wrote a str's characters
    conn = sqlite3.connect(path)
    tocsin.load(conn)
    conn.execute("BEGIN")
    for call in (lambda: tocsin.enqueue(conn, "q", 1, priority=True),
                 lambda: tocsin.enqueue(conn, "q", 1, priority=1.5),
                 lambda: tocsin.enqueue(conn, "q", 1, max_attempts=0),
                 lambda: tocsin.enqueue(conn, "q", 1, unique_key=5),
                 lambda: tocsin.enqueue(conn, 5, 1),
                 lambda: tocsin.enqueue(conn, "", 1),
                 lambda: tocsin.enqueue(conn, "q", "lone \ud800"),
                 lambda: tocsin.call(conn, "q", "t", "abc"),
                 lambda: tocsin.call(conn, "q", "t", None),
                 lambda: tocsin.call(conn, "q", "t", [], [("a", 1)]),
                 lambda: tocsin.call(conn, "q", "t", [], bogus=1),
                 lambda: tocsin.call(conn, "q", None, []),
                 lambda: tocsin.call(conn, "q", "", [])):
        with pytest.raises(tocsin.InvalidArgument):
            call()
    jid = tocsin.call(conn, "q", "t", ("a",), result_ttl=60, timeout=5, max_attempts=2)
    conn.commit()
    with tocsin.open(path) as db:
        assert db.queue("q").stats()["pending"] == 1
        job = db.queue("q").get(jid)
        assert job.max_attempts == 2 and job.payload["args"] == ["a"]
        assert job.payload["result_ttl_ms"] == 60000 and job.payload["timeout_ms"] == 5000
    conn.close()


def test_app_connection_helpers_raise_the_tocsin_class_of_each_refusal(path):
    """tocsin.enqueue / tocsin.call on the application's own connection raised the
    driver's sqlite3.DataError / OperationalError / ProgrammingError, where the same
    refusal through tocsin.open()'s handle (and through Node's enqueueSql, Ruby's
    Tocsin::SQL, Go's EnqueueTx) is a tocsin.Error of the core's class."""
    tocsin.open(path).close()
    conn = sqlite3.connect(path)
    tocsin.load(conn)
    conn.execute("BEGIN")
    cases = [
        (tocsin.PayloadTooLarge, lambda: tocsin.enqueue(conn, "q", "x" * (2 << 20))),
        (tocsin.PayloadTooLarge, lambda: tocsin.call(conn, "q", "t", ["x" * (2 << 20)])),
        (tocsin.InvalidArgument, lambda: tocsin.enqueue(conn, "q" * 300, 1)),
        (tocsin.InvalidArgument, lambda: tocsin.enqueue(conn, "q\x01", 1)),
        (tocsin.InvalidArgument, lambda: tocsin.call(conn, "q", "t" * 300, [])),
    ]
    for cls, fn in cases:
        with pytest.raises(cls) as ei:
            fn()
        assert isinstance(ei.value.__cause__, sqlite3.Error), ei.value
        assert ei.value.sqlite_code == ei.value.__cause__.sqlite_errorcode if hasattr(
            ei.value.__cause__, "sqlite_errorcode") else True
    # the same refusal through the handle is the same class
    with tocsin.open(path) as db:
        with pytest.raises(tocsin.PayloadTooLarge):
            db.queue("q").enqueue("x" * (2 << 20))
    conn.rollback()
    # a read-only connection: ReadOnly, as through a read-only handle
    ro = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    tocsin.load(ro)
    ro.execute("BEGIN")
    with pytest.raises(tocsin.ReadOnly):
        tocsin.enqueue(ro, "q", 1)
    ro.close()
    # the functions not loaded: InvalidArgument saying so
    bare = sqlite3.connect(path)
    bare.execute("BEGIN")
    with pytest.raises(tocsin.InvalidArgument, match=r"tocsin\.load\(conn\)"):
        tocsin.enqueue(bare, "q", 1)
    bare.close()
    # a closed connection: Closed
    conn.close()
    with pytest.raises(tocsin.Closed):
        tocsin.enqueue(conn, "q", 1, autocommit=True)
    with pytest.raises(tocsin.Closed):
        tocsin.call(conn, "q", "t", [])


def test_app_connection_helpers_take_run_at_and_expires(path):
    """Queue.enqueue's job options, in its units: run_at (datetime or epoch seconds) and
    expires (seconds or timedelta) were missing from tocsin.enqueue / tocsin.call."""
    import datetime
    tocsin.open(path).close()
    conn = sqlite3.connect(path)
    tocsin.load(conn)
    conn.execute("BEGIN")
    at = datetime.datetime(2031, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    a = tocsin.enqueue(conn, "q", 1, run_at=at, expires=datetime.timedelta(hours=1))
    b = tocsin.call(conn, "q", "t", [1], run_at=at.timestamp(), expires=90)
    with pytest.raises(tocsin.InvalidArgument, match="delay or run_at"):
        tocsin.enqueue(conn, "q", 1, run_at=at, delay=5)
    with pytest.raises(tocsin.InvalidArgument):
        tocsin.enqueue(conn, "q", 1, expires=0)
    conn.commit()
    conn.close()
    with tocsin.open(path) as db:
        ja, jb = db.queue("q").get(a), db.queue("q").get(b)
        want = int(at.timestamp() * 1000)
        assert (ja.run_at, jb.run_at) == (want, want)
        assert ja.state == jb.state == "scheduled"
        assert ja.expires_at - ja.created_at == 3600000
        assert jb.expires_at - jb.created_at == 90000


def test_app_connection_publish_and_notify_join_its_transaction(path):
    """tocsin.publish / tocsin.notify on the application's own connection (Node's
    publishSql / notifySql, Ruby's Tocsin::SQL.publish / notify, Go's PublishTx /
    NotifyTx): a rollback drops the event and the notification, a commit wakes a
    listener."""
    db = tocsin.open(path)
    listener = db.listen("orders")
    conn = sqlite3.connect(path)
    tocsin.load(conn)
    with pytest.raises(tocsin.InvalidArgument, match="no transaction is open"):
        tocsin.notify(conn, "orders", {"id": 0})
    with pytest.raises(tocsin.InvalidArgument, match="no transaction is open"):
        tocsin.publish(conn, "orders", {"id": 0})
    conn.execute("BEGIN")
    tocsin.publish(conn, "orders", {"id": 1})
    tocsin.notify(conn, "orders", {"id": 1})
    conn.rollback()
    assert db.stream("orders").read(after=0, limit=10) == []
    assert listener.get(timeout=0.2) == []
    conn.execute("BEGIN")
    off = tocsin.publish(conn, "orders", {"id": 2}, key="k", meta={"h": 1})
    nid = tocsin.notify(conn, "orders", {"id": 2}, meta={"h": 2})
    conn.commit()
    ev = db.stream("orders").read(after=0, limit=10)
    assert [(e.offset, e.key, e.payload, e.meta) for e in ev] == [(off, "k", {"id": 2}, {"h": 1})]
    notes = listener.get(timeout=10)
    assert [(n.id, n.payload, n.meta) for n in notes] == [(nid, {"id": 2}, {"h": 2})]
    conn.execute("BEGIN")
    with pytest.raises(tocsin.PayloadTooLarge):
        tocsin.publish(conn, "orders", "x" * (2 << 20))
    with pytest.raises(tocsin.InvalidArgument):
        tocsin.notify(conn, "", 1)
    conn.rollback()
    conn.close()
    listener.close()
    db.close()


def test_load_without_extension_loading_registers_through_tocsins_module(path):
    # the path tocsin.load takes where sqlite3 was built without extension loading
    # (pyenv's default CPython), taken here on purpose
    conn = sqlite3.connect(path)
    tocsin.ext._register_without_loading(conn)
    assert conn.execute("SELECT tocsin_version()").fetchone()[0] == tocsin.core_version()
    # its probe function is gone again
    assert conn.execute("SELECT count(*) FROM pragma_function_list WHERE name LIKE 'tocsin_probe%'"
                        ).fetchone()[0] == 0
    # the job joins the application's transaction: gone with its rollback, kept by a commit
    conn.execute("CREATE TABLE orders(id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.execute("INSERT INTO orders DEFAULT VALUES")
    tocsin.enqueue(conn, "emails", {"order": 1})
    conn.rollback()
    conn.execute("INSERT INTO orders DEFAULT VALUES")
    jid = tocsin.enqueue(conn, "emails", {"order": 2})
    conn.commit()
    with tocsin.open(path) as db:
        job = db.queue("emails").claim("w")
        assert (job.id, job.payload) == (jid, {"order": 2})
        assert db.queue("emails").claim("w") is None
    conn.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        tocsin.ext._register_without_loading(conn)
    with pytest.raises(tocsin.Error, match="no sqlite3.Connection"):
        tocsin.ext._register_without_loading(object())
