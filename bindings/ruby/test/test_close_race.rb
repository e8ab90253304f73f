# frozen_string_literal: true

require_relative "test_helper"

# Closing while other threads wait. A wait (a listener's, a stream
# subscription's, a subscription's) or a stream subscription's save ran
# without the GVL on a core object that a close in another thread freed under
# it: a heap use-after-free (ASan: tocsin_listen_next, tocsin_stream_sub_next,
# tocsin_sub_wait, tocsin_stream_sub_save), crashing or corrupting the heap one
# run in many. And what opened while Database#close ran in another thread --
# after it took its list (a listener, a stream subscription, a worker's run),
# or a subscription from #subscribe, which it did not close at all -- outlived
# the database: a wait on it never ended.
class TestCloseRace < Minitest::Test
  include TocsinTest

  # Runs a Ruby script in a child (in a process group of its own, with the
  # children it forks) for at most +limit+ seconds: a hang fails the test, and
  # leaves no process behind.
  def run_child(script, *args, limit:)
    Open3.popen3(*ruby_cmd("-e", script, *args), pgroup: true) do |stdin, stdout, stderr, th|
      stdin.close
      out = Thread.new { stdout.read }
      err = Thread.new { stderr.read }
      ended = th.join(limit)
      begin
        Process.kill(:KILL, -th.pid) # what is left of the group (a child it forked that hung)
      rescue Errno::ESRCH
        nil
      end
      th.join
      flunk "the child ran past #{limit} s\n#{out.join(5)&.value}\n#{err.join(5)&.value}" unless ended
      [out.join(5)&.value.to_s, err.join(5)&.value.to_s, th.value]
    end
  end

  STRESS = <<~'RUBY'
    require "tocsin"
    path, rounds = ARGV[0], Integer(ARGV[1])
    Thread.report_on_exception = false
    Thread.new { sleep 120; warn "the stress test ran past 120 s"; exit! 5 } # (a hang fails, never blocks the suite)
    setup = Tocsin.open(path)
    setup.lock("held", ttl: 600, owner: "holder").try_acquire or abort "the lock was not taken"
    jid = setup.queue("q").enqueue(1)
    setup.stream("saved").publish(1)
    reg = { "noop" => Tocsin::Task.new("noop", ->() { 1 }, queue: "never") }
    kinds = {
      "lock" => ->(db) { db.lock("held", ttl: 30, owner: "waiter").acquire(timeout: 30) },
      "jobs" => ->(db) { db.queue("empty").each_job("w", timeout: 30) { break } },
      "wait_result" => ->(db) { db.wait_result(jid, timeout: 30) },
      "listen" => ->(db) { db.listen("c", timeout: 30) { break } },
      "subscribe" => ->(db) { db.stream("s").subscribe(consumer: "c", timeout: 30) { break } },
      "wake" => ->(db) { db.subscribe.wait(30) },
      "save" => lambda do |db|
        s = db.stream("saved").subscribe(consumer: "saver", from_offset: 0)
        s.next_batch(timeout: 5)
        loop { s.save }
      end,
      "worker" => ->(db) { Tocsin::Worker.new(db, tasks: reg, scheduler: false).run },
    }
    names = kinds.keys
    rng = Random.new(7)
    ends = Hash.new(0)
    rounds.times do |i|
      kind = names[i % names.size]
      db = Tocsin.open(path)
      th = Thread.new do
        kinds[kind].call(db)
        :returned
      rescue Tocsin::Closed
        :closed
      end
      sleep(rng.rand * 0.012) # before, as and after the wait blocks
      db.close
      unless th.join(10)
        warn "round #{i}: a #{kind} wait outlived db.close", *th.backtrace.to_a.first(6)
        exit! 3
      end
      begin
        ends["#{kind}:#{th.value}"] += 1
      rescue Exception => e
        warn "round #{i}: the #{kind} wait ended with #{e.class}: #{e.message}", *e.backtrace.to_a.first(6)
        exit! 4
      end
    end
    puts "ok #{rounds} #{ends.sort.map { |k, n| "#{k}=#{n}" }.join(" ")}"
  RUBY

  def test_closing_the_database_while_another_thread_waits_never_crashes_or_hangs
    out, err, st = run_child(STRESS, @path, "160", limit: 150)
    assert st.success?, "exit #{st.inspect}\n#{out[-2000..] || out}\n#{err[-3000..] || err}"
    words = out.split
    assert_equal %w[ok 160], words.first(2), out
    assert(words.any? { |w| w.start_with?("listen:closed=") }, "some listen waits were closed under: #{out}")
  end

  # The use in progress is one thread's; a close from inside it (a trap run by
  # the waiting thread) cannot wait for it to end: the wait frees it on its way out.
  def test_a_trap_that_closes_the_listener_it_interrupts
    l = db.listen("c")
    old = Signal.trap("USR1") { l.close }
    t = Thread.new { sleep 0.1; Process.kill("USR1", Process.pid) }
    e = assert_raises(Tocsin::Closed) { l.next_batch(timeout: 10) }
    assert_match(/closed/, e.message)
    assert l.closed?
    t.join
    assert_raises(Tocsin::Closed) { l.next_batch(timeout: 0) }
  ensure
    Signal.trap("USR1", old || "DEFAULT")
  end

  # One thread at a time in the core on a listener: a second waits its turn
  # (both raced in the core's ring before), and a close ends both.
  def test_two_threads_waiting_on_one_listener
    l = db.listen("c")
    threads = 2.times.map do
      Thread.new do
        l.next_batch(timeout: 10)
      rescue Tocsin::Closed
        :closed
      end
    end
    sleep 0.05 until threads.all? { |t| t.status == "sleep" }
    db.notify("c", 1)
    sleep 0.2
    l.close
    values = threads.map { |t| t.join(5)&.value }
    assert_equal 2, values.compact.size, "both threads ended"
    got = values.grep(Array)
    assert_equal [[1]], got.map { |b| b.map(&:payload) }, "the notification went to one of them"
    assert_includes values, :closed
  end

  # A call of another thread waiting for the write lock (held here by another
  # connection's transaction; busy_timeout 60 s) made close wait for that
  # timeout. Now the call raises Closed and close returns.
  def test_close_ends_another_threads_wait_for_the_write_lock
    mine = Tocsin.open(@path, busy_timeout: 60)
    mine.queue("q").enqueue(1)
    Tocsin.open(@path) do |other|
      tx = other.transaction
      ready = ::Queue.new
      t = Thread.new do
        ready << true
        mine.queue("q").enqueue(2)
        :enqueued
      rescue Tocsin::Error => e
        e
      end
      ready.pop
      sleep 0.1 # into its lock wait (if not, it meets the closed database: the same)
      mine.close
      assert t.join(30), "the waiting enqueue did not end with close"
      assert_kind_of Tocsin::Closed, t.value
      tx.rollback
      assert_equal 1, other.queue("q").stats["pending"]
    end
  end

  # Thread#raise arriving as the transaction began (or as it committed) lost
  # the handle: its write lock stayed taken until GC, every other writer got Busy.
  def test_thread_raise_never_leaves_a_transaction_open
    q = db.queue("q")
    rng = Random.new(11)
    Tocsin.open(@path, busy_timeout: 0.2) do |other|
      120.times do |i|
        ready = ::Queue.new
        t = Thread.new do
          ready << true
          loop { db.transaction { |tx| q.enqueue(1, tx: tx) } }
        rescue RuntimeError
          :stopped
        end
        ready.pop
        sleep(rng.rand * 0.003)
        t.raise("stop")
        t.join(10)
        begin
          other.queue("other").enqueue(i)
        rescue Tocsin::Busy
          flunk "round #{i}: a transaction was left open (the write lock is still held)"
        end
      end
    end
  end

  # An interrupt (Timeout, Thread#raise) that landed as a batch came back from the
  # core, before any of it was handed out, lost the batch: the core counted it
  # processed, so the next call skipped it and the close saved past it.
  def test_an_interrupt_as_a_batch_comes_back_loses_none_of_it
    s = db.stream("s")
    3.times { |i| s.publish(i) }
    sub = s.subscribe(consumer: "c")
    hits = 0
    # (as if the interrupt fired there: the rows are in Ruby's hands, not yet the caller's)
    sub.define_singleton_method(:wrap) do |r|
      hits += 1
      raise Interrupt, "interrupted" if hits == 1

      Tocsin::Event.new(*r)
    end
    assert_raises(Interrupt) { sub.next_batch(timeout: 1) }
    assert_equal [0, 1, 2], sub.next_batch(timeout: 1).map(&:payload)
    sub.close
    hits = 0
    sub = s.subscribe(consumer: "c2")
    sub.define_singleton_method(:wrap) do |r|
      hits += 1
      raise Interrupt, "interrupted" if hits == 1

      Tocsin::Event.new(*r)
    end
    assert_raises(Interrupt) { sub.each(timeout: 0.2) { flunk "nothing was handed out" } }
    sub.close # saves nothing: nothing was handed out
    got = []
    s.subscribe(consumer: "c2", timeout: 0.2) { |e| got << e.payload }
    assert_equal [0, 1, 2], got
  end

  # A child of fork() inherits the objects that the parent's threads were
  # waiting on, with the waits recorded: its close, and the frees at its exit,
  # waited for threads that do not exist there (the child never ended).
  FORKED = <<~'RUBY'
    require "tocsin"
    Thread.new { sleep 60; warn "the fork test ran past 60 s"; exit! 5 }
    db = Tocsin.open(ARGV[0])
    reg = { "noop" => Tocsin::Task.new("noop", ->() { 1 }, queue: "n") }
    worker = Tocsin::Worker.new(db, tasks: reg, scheduler: false)
    l = db.listen("c")
    s = db.stream("s").subscribe(from_offset: 0)
    sub = db.subscribe
    threads = [
      Thread.new { worker.run rescue $! }, # (Tocsin::Closed: the database closed under it)
      Thread.new { l.next_batch(timeout: 30) rescue $! },
      Thread.new { s.next_batch(timeout: 30) rescue $! },
      Thread.new { loop { sub.wait(30) } rescue $! }, # (the worker's commits wake it)
      Thread.new { db.queue("empty").wait(timeout: 30) rescue $! },
    ]
    db.queue("n").call("noop").value(timeout: 10)
    sleep 0.05 until threads.drop(1).all? { |t| t.status == "sleep" }
    sleep 0.1
    children = [
      fork { db.close },         # closes (what its threads used is left as it is), then exits
      fork {}, # exits at once: the frees at exit
    ]
    hung = children.count do |pid|
      ended = 100.times.any? { Process.wait2(pid, Process::WNOHANG) || (sleep 0.05; false) }
      unless ended
        Process.kill(:KILL, pid)
        Process.wait(pid)
      end
      !ended
    end
    abort "#{hung} of #{children.size} children of fork() did not end" if hung.positive?
    db.close
    abort "a thread outlived db.close" unless threads.all? { |t| t.join(10) }
    puts "ok"
  RUBY

  def test_a_child_of_fork_closes_and_exits_while_the_parent_waits
    out, err, st = run_child(FORKED, @path, limit: 60)
    assert st.success?, "exit #{st.inspect}\n#{out}\n#{err[-3000..] || err}"
    assert_equal "ok", out.strip
  end
end
