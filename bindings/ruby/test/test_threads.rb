# frozen_string_literal: true

require_relative "test_helper"

# One Database from many threads; cancellation and run timeouts in the worker.
class TestThreads < Minitest::Test
  include TocsinTest

  def test_one_database_from_eight_threads
    q = db.queue("q")
    threads = 8.times.map do |t|
      Thread.new do
        50.times { |i| q.enqueue({ "t" => t, "i" => i }) }
        db.transaction { |tx| 5.times { q.enqueue({ "t" => t, "tx" => true }, tx: tx) } }
      end
    end
    threads.each(&:join)
    assert_equal 8 * 55, q.stats["pending"]
    claimed = ::Queue.new
    workers = 4.times.map do |w|
      Thread.new { q.each_job("w#{w}", batch: 5, timeout: 0.2) { |j| claimed << j.id } }
    end
    workers.each(&:join)
    ids = Array.new(claimed.size) { claimed.pop }
    assert_equal 8 * 55, ids.size
    assert_equal ids.size, ids.uniq.size, "no job was handed out twice"
  end

  def test_worker_interrupts_a_cancelled_run_and_times_out_a_slow_one
    started = ::Queue.new
    reg = {
      "sleepy" => Tocsin::Task.new("sleepy", ->(s) { started << true; sleep s; "woke" }, queue: "t"),
      "limited" => Tocsin::Task.new("limited", ->(s) { sleep s; "late" }, queue: "t", retries: 0, timeout: 0.2)
    }
    w = Tocsin::Worker.new(db, tasks: reg, scheduler: false, concurrency: 2, visibility: 3)
    th = Thread.new { w.run }
    h = db.queue("t").call("sleepy", 30)
    started.pop
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert db.queue("t").cancel(h.job_id)
    sleep 0.05 until w.in_flight.zero? || Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0 > 10
    assert_equal 0, w.in_flight, "the cancelled run was interrupted"
    assert_equal "cancelled", db.queue("t").get(h.job_id).reason
    e = assert_raises(Tocsin::TaskError) { db.queue("t").call("limited", 5).value(timeout: 10) }
    assert_equal "Timeout", e.type
  ensure
    w&.stop
    th&.join(10)
  end
end

class TestTransactionExits < Minitest::Test
  include TocsinTest

  def test_break_out_of_a_transaction_rolls_back
    q = db.queue("q")
    [1].each { db.transaction { |tx| q.enqueue(1, tx: tx); break } }
    assert_equal 0, q.stats["pending"]
    catch(:out) { db.transaction { |tx| q.enqueue(1, tx: tx); throw :out } }
    assert_equal 0, q.stats["pending"]
    tx = db.transaction
    q.enqueue(2, tx: tx)
    tx.commit
    refute tx.active?
    assert_raises(Tocsin::Closed) { q.enqueue(3, tx: tx) }
    assert_equal 1, q.stats["pending"]
  end
end

class TestCloseWithWorkers < Minitest::Test
  include TocsinTest

  def test_closing_the_database_stops_its_running_worker_first
    reg = { "noop" => Tocsin::Task.new("noop", ->() { 1 }, queue: "n") }
    d = Tocsin.open(@path)
    w = Tocsin::Worker.new(d, tasks: reg, scheduler: false)
    th = Thread.new { w.run }
    assert_equal 1, d.queue("n").call("noop").value(timeout: 10)
    d.close
    # the worker stopped first; its run then raised Tocsin::Closed
    assert_raises(Tocsin::Closed) { th.join(10) }
    refute th.alive?
    assert d.closed?
  end
end
