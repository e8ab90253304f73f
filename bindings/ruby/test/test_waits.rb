# frozen_string_literal: true

require_relative "test_helper"
require "timeout"

# Waits run without the GVL and are interrupted by Thread#raise, Thread#kill,
# Timeout.timeout and #poke; under a Fiber scheduler they yield to other fibers.
class TestWaits < Minitest::Test
  include TocsinTest

  def blocked_listener_thread(&body)
    started = ::Queue.new
    t = Thread.new do
      l = db.listen("never")
      started << true
      body.call(l)
    ensure
      l&.close
    end
    started.pop
    sleep 0.05 until t.status == "sleep" || !t.alive?
    t
  end

  def test_thread_raise_interrupts_a_blocked_listen
    t = blocked_listener_thread { |l| l.next_batch }
    ticks = 0
    3.times { ticks += 1; sleep 0.01 } # other threads run: the wait holds no GVL
    t.raise(RuntimeError, "stop listening")
    e = assert_raises(RuntimeError) { t.join(5) }
    assert_equal "stop listening", e.message
    assert_equal 3, ticks
  end

  def test_thread_kill_ends_a_blocked_listen
    t = blocked_listener_thread { |l| l.next_batch }
    t.kill
    assert t.join(5), "the killed thread ended"
    refute t.alive?
  end

  def test_timeout_timeout_interrupts_listen_and_result_wait
    l = db.listen("never")
    assert_raises(Timeout::Error) { Timeout.timeout(0.1) { l.next_batch } }
    l.close
    id = db.queue("q").enqueue(1)
    assert_raises(Timeout::Error) { Timeout.timeout(0.1) { db.wait_result(id) } }
    assert_raises(Timeout::Error) { Timeout.timeout(0.1) { db.queue("empty").wait } }
    holder = db.lock("l", ttl: 60, owner: "x")
    holder.try_acquire
    assert_raises(Timeout::Error) { Timeout.timeout(0.1) { db.lock("l", owner: "y").acquire } }
  end

  def test_poke_raises_interrupted_in_the_waiting_thread
    l = db.listen("never")
    t = Thread.new { l.next_batch }
    sleep 0.05 until t.status == "sleep"
    l.poke
    assert_raises(Tocsin::Interrupted) { t.join(5) }
    l.close
  end

  def test_a_trap_that_returns_resumes_the_wait
    hits = 0
    old = Signal.trap("USR1") { hits += 1 }
    l = db.listen("c")
    t = Thread.new { sleep 0.1; Process.kill("USR1", Process.pid); sleep 0.1; Tocsin.open(@path) { |d| d.notify("c", 7) } }
    got = l.next_batch(timeout: 5)
    t.join
    assert_equal 1, hits
    assert_equal [7], got.map(&:payload)
  ensure
    Signal.trap("USR1", old || "DEFAULT")
    l&.close
  end

  def test_stream_subscription_interrupted_by_thread_raise
    sub = db.stream("s").subscribe(from_offset: 0)
    t = Thread.new { sub.next_batch }
    sleep 0.05 until t.status == "sleep"
    t.raise(ArgumentError, "x")
    assert_raises(ArgumentError) { t.join(5) }
    sub.close
  end

  def test_wait_result_timeout_says_why
    q = db.queue("why")
    id = q.enqueue("x")
    e = assert_raises(Tocsin::Timeout) { db.wait_result(id, timeout: 0.02) }
    assert_equal %(no result for job #{id} within 0.02 s: job #{id} was never claimed: no worker took it from queue "why"),
                 e.message
    job = q.claim("w-why")
    assert_match(/is running \(attempt 1 of \d+, worker w-why\)/, assert_raises(Tocsin::Timeout) { db.wait_result(id, timeout: 0.02) }.message)
    job.retry(delay: 60, error: "flaky")
    assert_match(/is retrying: attempt 1 of \d+ ended \(flaky\)/, assert_raises(Tocsin::Timeout) { db.wait_result(id, timeout: 0.02) }.message)
    require "async"
    msg = nil
    Async { msg = assert_raises(Tocsin::Timeout) { db.wait_result(id, timeout: 0.02) }.message }
    assert_match(/^no result for job #{id} within 0.02 s: job #{id} is retrying/, msg)
    db.save_result(id, "late")
    assert_equal "late", db.wait_result(id, timeout: 0).value
  end

  def test_fiber_scheduler_waits_yield_to_other_fibers
    require "async"
    got = []
    ticks = 0
    results = nil
    Async do |task|
      listener = task.async do
        db.listen("orders", timeout: 5) do |n|
          got << n.payload
          break if got.size == 2
        end
      end
      waiter = task.async do
        id = db.queue("q").enqueue(1)
        task.async { sleep 0.05; Tocsin.open(@path) { |d| d.save_result(id, "done") } }
        results = db.wait_result(id, timeout: 5).value
      end
      ticker = task.async do
        10.times { ticks += 1; sleep 0.01 }
      end
      task.async do
        sleep 0.05
        db.notify("orders", 1)
        db.notify("orders", 2)
      end
      [listener, waiter, ticker].each(&:wait)
    end
    assert_equal [1, 2], got
    assert_equal "done", results
    assert_equal 10, ticks, "the ticker fiber ran while others waited"
  end

  def test_fiber_scheduler_each_job_and_lock
    require "async"
    seen = []
    Async do |task|
      consumer = task.async do
        db.queue("q").each_job("w", timeout: 0.3) { |j| seen << j.payload }
      end
      task.async do
        sleep 0.05
        db.queue("q").enqueue("a")
        sleep 0.05
        db.queue("q").enqueue("b")
      end
      holder = db.lock("L", ttl: 30, owner: "h")
      holder.try_acquire
      locker = task.async { db.with_lock("L", timeout: 5) { |l| l.token } }
      task.async { sleep 0.05; holder.release }
      consumer.wait
      assert locker.wait.positive?
    end
    assert_equal %w[a b], seen
  end
  # Under a Fiber scheduler a wait sleeps on a descriptor that the database's close
  # closes, which takes it out of the scheduler's selector without waking it: a close
  # from another fiber left waits without a timeout asleep for good. They end with
  # Tocsin::Closed, as in threads.
  def test_close_ends_the_waits_of_other_fibers
    require "async"
    got = {}
    runner = Thread.new do
      Async do |task|
        waits = {
          listen: -> { db.listen("never") { nil } },
          subscribe: -> { db.stream("s").subscribe(consumer: "c") { nil } },
          wait_result: -> { db.wait_result(db.queue("q").enqueue(1)) },
          queue_wait: -> { db.queue("empty").wait },
          subscription: -> { s = db.subscribe; loop { s.wait } } # (a commit wakes it: it waits again)
        }
        fibers = waits.map do |name, wait|
          task.async do
            wait.call
            got[name] = :returned
          rescue Exception => e # rubocop:disable Lint/RescueException
            got[name] = e.class
          end
        end
        sleep 0.1 # (the fibers wait; one that had not begun would raise Closed as it began)
        db.close
        fibers.each { |f| f.wait }
      end
    end
    assert runner.join(60), "the waits of the other fibers did not end after the close"
    assert_equal %i[listen subscribe wait_result queue_wait subscription].to_h { |n| [n, Tocsin::Closed] }, got
  end

  # Under a Fiber scheduler, db.transaction's BEGIN waited for the write lock on the
  # fiber's thread: with another fiber of that thread holding the lock (its own
  # db.transaction, yielding inside), every fiber stood still -- the holder could
  # not commit -- until the BEGIN raised Busy after the busy timeout. Now the BEGIN
  # waits off the thread, the holder commits, then the second transaction does.
  def test_fiber_scheduler_transaction_waits_for_another_fibers_transaction
    require "async"
    @db = Tocsin.open(@path, busy_timeout: 30)
    q = db.queue("q")
    order = []
    Async do |task|
      holder = task.async do
        db.transaction do |tx|
          q.enqueue("a", tx: tx)
          task.sleep 0.05 # (the other fiber begins meanwhile)
          order << :a
        end
      end
      waiter = task.async do
        db.transaction do |tx|
          order << :b
          q.enqueue("b", tx: tx)
        end
      end
      [holder, waiter].each(&:wait)
    end
    # (either may begin first: both BEGINs wait off the thread; neither raised Busy)
    assert_equal %i[a b], order.sort
    assert_equal 2, q.stats["pending"]
  end

  # The BEGIN's cancel token (what a stopped fiber fires): fired from another thread,
  # it ends a wait for another connection's write lock with Interrupted, nothing begun,
  # long before the busy timeout.
  def test_cancel_token_ends_a_begin_waiting_for_the_lock
    @db = Tocsin.open(@path, busy_timeout: 600) # (a wait not ended would hang the join below)
    holder = Tocsin.open(@path)
    htx = holder.transaction
    holder.queue("q").enqueue("held", tx: htx)
    cancel = Tocsin::Native::Cancel.new
    th = Thread.new { db.native.tx_begin(cancel) }
    th.report_on_exception = false
    sleep 0.02 # (most likely waiting by now; fired before the wait, it fails at once too)
    cancel.fire
    # (join re-raises the thread's exception; nil: still waiting after 60 s)
    e = assert_raises(Tocsin::Interrupted) { th.join(60) or flunk("the BEGIN still waits after the fire") }
    assert_match(/cancelled while this call waited/, e.message)
    htx.commit
    db.transaction { |tx| db.queue("q").enqueue("after", tx: tx) }
    assert_equal %w[held after], db.queue("q").claim_batch(5, "w").map(&:payload)
    assert_raises(TypeError) { db.native.tx_begin("soon") }
  ensure
    holder&.close
  end

  # A fiber stopped while its BEGIN waits leaves nothing begun behind: the
  # transaction its thread begins later is rolled back, and the lock is free.
  def test_fiber_stopped_while_its_transaction_begins_holds_no_lock
    require "async"
    @db = Tocsin.open(@path, busy_timeout: 30)
    q = db.queue("q")
    got = nil
    Async do |task|
      holder = task.async do
        db.transaction do |tx|
          q.enqueue("a", tx: tx)
          task.sleep 0.05
        end
      end
      waiter = task.async do
        db.transaction { |tx| q.enqueue("never", tx: tx) }
        got = :committed
      end
      task.yield
      waiter.stop
      holder.wait
    end
    assert_nil got
    # (the reaper thread's rollback; a transaction waits for it at most busy_timeout)
    db.transaction { |tx| q.enqueue("after", tx: tx) }
    assert_equal %w[a after], q.claim_batch(5, "w").map(&:payload)
  end
end
