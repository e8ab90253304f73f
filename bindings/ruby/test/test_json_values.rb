# frozen_string_literal: true

require_relative "test_helper"
require "tocsin/sql"

# Payloads, results, meta and task arguments are JSON values only: a Hash with
# String or Symbol keys, an Array, a String, an Integer, a finite Float, true,
# false, nil. Anything else was stored through its #to_s (the json gem has no
# strict mode: enqueue(Object.new) stored "#<Object...>", a Time became a
# String); now it is a Tocsin::InvalidArgument naming its class and where it
# is, and nothing is written.
class TestJSONValues < Minitest::Test
  include TocsinTest

  def refused(what, &call)
    e = assert_raises(Tocsin::InvalidArgument, "#{what.inspect} at #{call.source_location.inspect}", &call)
    assert_match what, e.message, "at #{call.source_location.inspect}"
    e
  end

  def test_json_values_round_trip
    q = db.queue("q")
    v = { "s" => "x", :sym => [1, -2**70, 2.5, true, false, nil, { "n" => {} }], "e" => [], "u" => "café" }
    id = q.enqueue(v)
    assert_equal({ "s" => "x", "sym" => [1, -2**70, 2.5, true, false, nil, { "n" => {} }], "e" => [], "u" => "café" },
                 q.get(id).payload)
    sub = Class.new(String).new("sub")   # subclasses of the builtin types are their types
    q.enqueue(Class.new(Hash)[{ "a" => sub }])
    assert_equal [nil, 1, "x", 1.5, false], [nil, 1, "x", 1.5, false].map { |p| q.get(q.enqueue(p)).payload }
  end

  def test_non_json_values_are_refused_with_their_place
    q = db.queue("q")
    e = refused(/\Apayload is an Object, not a JSON value/) { q.enqueue(Object.new) }
    assert_match(/a Hash with String or Symbol keys, an Array, a String, an Integer, a finite Float, true, false or nil/,
                 e.message)
    refused(/\Apayload is a Time, not a JSON value/) { q.enqueue(Time.now) }
    refused(/\Apayload\["a"\]\[2\] is a Time/) { q.enqueue({ "a" => [1, 2, Time.now] }) }
    refused(/\Apayload\[:a\]\[:b\] is a Symbol/) { q.enqueue({ a: { b: :c } }) }
    refused(/\Apayload is a Rational/) { q.enqueue(1r) }
    refused(/\Apayload is a Range/) { q.enqueue(1..2) }
    refused(/\Apayload\[0\] is an anonymous Struct subclass/) { q.enqueue([Struct.new(:a).new(1)]) }
    refused(/\Apayload\[0\] is NaN, which JSON cannot hold/) { q.enqueue([Float::NAN]) }
    refused(/\Apayload\["x"\] is Infinity/) { q.enqueue({ "x" => Float::INFINITY }) }
    refused(/\Apayload is -Infinity/) { q.enqueue(-Float::INFINITY) }
    refused(/\Apayload\["a"\] has the key 1 \(an Integer\): the keys of a JSON object are Strings or Symbols/) do
      q.enqueue({ "a" => { 1 => 2 } })
    end
    refused(/\Apayload has the key nil/) { q.enqueue({ nil => 1 }) }
    cyc = {}
    cyc["me"] = cyc
    refused(/\Apayload\["me"\]\["me"\].* is nested deeper than 1000 levels \(or contains itself\)/) { q.enqueue(cyc) }
    ok = (1..999).reduce([]) { |acc, _| [acc] } # 1000 levels, as the core allows
    q.enqueue(ok)
    refused(/nested deeper/) { q.enqueue([ok]) }
    bad = "\xFF".dup.force_encoding("UTF-8")
    refused(/\Apayload is the String "\\xFF", which is not valid UTF-8 \(JSON text is UTF-8\)\z/) { q.enqueue(bad) }
    assert_equal 1, q.stats["pending"]
  end

  # Every path that serialises takes the same check, naming its own argument.
  def test_every_serialising_path_refuses
    t = Time.now
    q = db.queue("q")
    s = db.stream("s")
    refused(/\Ajobs\[1\] is a Time/) { q.enqueue_many([1, t]) }
    refused(/\Ajobs\[0\]\[:payload\]\["at"\] is a Time/) { q.enqueue_many([{ payload: { "at" => t } }]) }
    refused(/\Ajobs\[0\] meta\["at"\] is a Time/) { q.enqueue_many([{ payload: 1, meta: { "at" => t } }]) }
    refused(/\Ameta\["at"\] is a Time/) { q.enqueue(1, meta: { "at" => t }) }
    refused(/\Apayload is a Time/) { db.notify("c", t) }
    refused(/\Ameta\[:x\] is NaN/) { db.notify("c", 1, meta: { x: Float::NAN }) }
    refused(/\Apayload\[0\] is an Object/) { s.publish([Object.new]) }
    refused(/\Ameta\["k"\] is a Symbol/) { s.publish(1, meta: { "k" => :v }) }
    refused(/\Apayloads\[2\] is a Time/) { s.publish_many([1, 2, t]) }
    refused(/\Aresult is a Time/) { db.save_result(1, t) }
    refused(/\Aresult\["x"\] is an Object/) { db.save_result(1, { "x" => Object.new }) }
    refused(/\Apayload is a Time/) { db.schedule("s", "* * * * *", queue: "q", payload: t) }
    refused(/\Ameta\["t"\] is a Time/) { db.schedule("s", "* * * * *", queue: "q", meta: { "t" => t }) }
    refused(/\Apayload\[0\] is a Time/) { db.update_schedule("s", payload: [t]) }
    refused(/\Aargs\[1\] is a Time/) { q.call("task", 1, t) }
    refused(/\Akwargs\[:at\] is a Time/) { q.call("task", kwargs: { at: t }) }
    refused(/\Aargs\[0\] is an Object/) { db.task_envelope("task", Object.new) }
    refused(/\Akwargs\[:a\] is NaN/) { db.call("task", kwargs: { a: Float::NAN }) }
    db.transaction do |tx|
      refused(/\Apayload is a Time/) { tx.enqueue("q", t) }
      refused(/\Apayload is a Time/) { tx.publish("s", t) }
      refused(/\Apayload is a Time/) { tx.notify("c", t) }
    end
    assert_equal [0, 0, 0, 0, nil], [q.stats["pending"], s.read.size, db.notifications("c").size, db.schedules.size,
                                     db.result(1)]
  end

  def test_sqlite3_gem_helpers_refuse
    require "sqlite3"
    conn = ::SQLite3::Database.new(@path)
    Tocsin::SQL.load(conn)
    refused(/\Apayload is a Time/) { Tocsin::SQL.enqueue(conn, "q", Time.now) }
    refused(/\Ameta\["t"\] is a Time/) { Tocsin::SQL.enqueue(conn, "q", 1, meta: { "t" => Time.now }) }
    refused(/\Apriority must be an Integer, not Float/) { Tocsin::SQL.enqueue(conn, "q", 1, priority: 1.5) }
    refused(/\Aqueue must be a String or Symbol, not nil/) { Tocsin::SQL.enqueue(conn, nil, 1) }
    refused(/\Apayload\[0\] is an Object/) { Tocsin::SQL.notify(conn, "c", [Object.new]) }
    refused(/\Apayload is a Symbol/) { Tocsin::SQL.publish(conn, "s", :x) }
    refused(/\Aconn must be a SQLite3::Database \(or an ActiveRecord connection\), not nil/) do
      Tocsin::SQL.enqueue(nil, "q", 1)
    end
    refused(/\Aconn must be a SQLite3::Database/) { Tocsin::SQL.load("app.db") }
    conn.close
    assert_equal 0, db.queue("q").stats["pending"]
  end

  # A task's return value that is no JSON value: the run fails with
  # SerializationError (it was stored through to_s); current_job.transaction's
  # value raises inside the task (the transaction rolls back, the job is retried).
  def test_task_results_must_be_json
    reg = {}
    reg["time"] = Tocsin::Task.new("time", -> { Time.at(0) }, queue: "t", retries: 0)
    reg["tx"] = Tocsin::Task.new("tx", lambda {
      Tocsin.current_job.transaction do |tx|
        tx.execute("CREATE TABLE IF NOT EXISTS side(x)")
        tx.execute("INSERT INTO side VALUES (1)")
        [Object.new]
      end
    }, queue: "t", retries: 0)
    reg["ok"] = Tocsin::Task.new("ok", -> { { at: Time.at(0).utc.strftime("%FT%TZ") } }, queue: "t", retries: 0)
    w = Tocsin::Worker.new(db, tasks: reg, scheduler: false)
    th = Thread.new { w.run }
    q = db.queue("t")
    e = assert_raises(Tocsin::TaskError) { q.call("time").value(timeout: 10) }
    assert_equal "SerializationError", e.type
    assert_match(/result is a Time, not a JSON value/, e.message)
    e = assert_raises(Tocsin::TaskError) { q.call("tx").value(timeout: 10) }
    assert_equal "Tocsin::InvalidArgument", e.type
    assert_match(/result\[0\] is an Object/, e.message)
    assert_equal({ "at" => "1970-01-01T00:00:00Z" }, q.call("ok").value(timeout: 10))
    w.stop
    th.join(10)
  end
end
