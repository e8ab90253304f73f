# frozen_string_literal: true

require_relative "test_helper"
require "json"

# A trap handler runs while the main thread waits in tocsin, then the wait
# resumes (as Ruby's own sleep does). A signal sent from another thread of the
# process (Process.kill(:USR1, Process.pid)) used to run its trap only when the
# wait ended: Ruby's C signal handler marks the main thread and leaves calling
# the wait's unblock function to a thread that sleeps in Ruby, and there was
# none once the sender had exited (or when the other threads ran Ruby code or
# waited in tocsin themselves). Each case runs in a process of its own, so that
# no thread of the test runner can stand in for the missing one.
class TestSignals < Minitest::Test
  include TocsinTest

  SCRIPT = <<~'RUBY'
    require "tocsin"
    require "json"
    Thread.report_on_exception = false
    db = Tocsin.open(ARGV[0])
    kind, others = ARGV[1], ARGV[2]
    mono = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    t0 = mono.call
    trap_at = nil
    trap("USR1") { trap_at = mono.call - t0 }
    sender = -> { sleep 0.2; Process.kill(:USR1, Process.pid) }
    case others
    when "sender_exits" then Thread.new(&sender)
    when "sender_waits_in_tocsin" then Thread.new { sender.call; db.listen("other").next_batch(timeout: 5) }
    when "sender_spins" then Thread.new { sender.call; x = 0; x += 1 while mono.call - t0 < 1.0 }
    when "alone"
      pid = Process.pid
      fork { sleep 0.2; Process.kill(:USR1, pid); exit!(0) }
    end
    q = db.queue("q")
    result =
      case kind
      when "listen" then db.listen("c").next_batch(timeout: 1.5)
      when "listen_then_data"
        l = db.listen("c")
        Thread.new { sleep 0.6; Tocsin.open(ARGV[0]) { |d| d.notify("c", 7) } }
        l.next_batch(timeout: 5).map(&:payload)
      when "stream" then db.stream("s").subscribe(from_offset: 0).next_batch(timeout: 1.5)
      when "queue" then q.wait(timeout: 1.5)
      when "each_job" then q.each_job("w", timeout: 1.5) { nil }
      when "result"
        id = q.enqueue(1)
        begin
          db.wait_result(id, timeout: 1.5)
        rescue Tocsin::Timeout
          "timeout"
        end
      when "lock"
        db.lock("l", owner: "someone else", ttl: 60).try_acquire
        db.lock("l").acquire(timeout: 1.5)
      when "sub" then db.subscribe.wait(1.5)
      end
    helpers = Thread.list.count { |t| t.name == "tocsin-signals" }
    puts JSON.generate(trap_at: trap_at, ended: mono.call - t0, result: result.inspect, helpers: helpers)
  RUBY

  def run_case(kind, others)
    out, err, st = Open3.capture3("timeout", "-s", "KILL", "30", *ruby_cmd("-e", SCRIPT, @path, kind, others))
    assert st.success?, "#{kind}/#{others}: #{out}\n#{err}"
    JSON.parse(out.lines.last)
  end

  EXPECTED = { "listen" => "[]", "listen_then_data" => "[7]", "stream" => "[]", "queue" => "false",
               "each_job" => "nil", "result" => "\"timeout\"", "lock" => "false", "sub" => "false" }.freeze

  def check(kind, others)
    r = run_case(kind, others)
    what = "#{kind} (other threads: #{others}): #{r.inspect}"
    refute_nil r["trap_at"], "the trap never ran: #{what}"
    assert_operator r["trap_at"], :<, 1.0, "the trap waited for the wait's end: #{what}"
    assert_equal EXPECTED.fetch(kind), r["result"], what
    # the wait resumed after the trap and ran to its own end
    assert_operator r["ended"], :>=, kind == "listen_then_data" ? 0.55 : 1.45, what
    assert_equal 0, r["helpers"], "the signal helper outlived the wait: #{what}"
  end

  def test_every_wait_runs_the_trap_of_a_signal_sent_by_a_thread_that_then_exits
    EXPECTED.each_key { |kind| check(kind, "sender_exits") }
  end

  def test_the_trap_runs_when_the_other_threads_wait_in_tocsin_or_run_ruby
    %w[sender_waits_in_tocsin sender_spins].each { |others| check("listen", others) }
    check("queue", "sender_waits_in_tocsin")
  end

  def test_the_trap_runs_in_a_single_threaded_process
    %w[listen queue lock].each { |kind| check(kind, "alone") }
  end

  # A trap that raises ends the wait with its exception; the helper is gone.
  def test_a_raising_trap_ends_the_wait_and_the_helper
    script = <<~'RUBY'
      require "tocsin"
      db = Tocsin.open(ARGV[0])
      trap("USR1") { raise "from the trap" }
      Thread.new { sleep 0.2; Process.kill(:USR1, Process.pid) }
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      begin
        db.queue("q").wait(timeout: 5)
        puts "returned"
      rescue RuntimeError => e
        took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
        sleep 0.05
        puts [e.message, took < 2, Thread.list.count { |t| t.name == "tocsin-signals" }].inspect
      end
    RUBY
    out, err, st = Open3.capture3("timeout", "-s", "KILL", "30", *ruby_cmd("-e", script, @path))
    assert st.success?, err
    assert_equal %(["from the trap", true, 0]\n), out
  end

  # Database#close in a trap raised ThreadError ("can't be called from trap
  # context": its Mutex). It closes now, ending a listener's wait in another thread.
  def test_close_from_a_trap
    script = <<~'RUBY'
      require "tocsin"
      db = Tocsin.open(ARGV[0])
      l = db.listen("c")
      waiter = Thread.new do
        l.next_batch(timeout: 20)
        :woken
      rescue Tocsin::Closed
        :closed
      end
      sleep 0.1
      said = nil
      trap("USR1") do
        db.close
        said = db.closed? ? "closed" : "open"
      rescue Exception => e # rubocop:disable Lint/RescueException
        said = "#{e.class}: #{e.message}"
      end
      Process.kill(:USR1, Process.pid)
      sleep 0.05 until said
      puts said, waiter.value
    RUBY
    out, err, st = Open3.capture3("timeout", "-s", "KILL", "30", *ruby_cmd("-e", script, @path))
    assert st.success?, "#{st.inspect}\n#{out}\n#{err}"
    assert_equal %w[closed closed], out.split, err
  end

  # A worker run with trap_signals: the first TERM drains (the running handler may
  # finish within shutdown_timeout), a second hands it back at once, with no attempt
  # consumed (docs/worker-protocol.md, Shutdown), as Python's and Node's workers do.
  # Before, the second TERM only asked to stop again: the worker waited out the whole
  # shutdown_timeout.
  def test_a_second_term_hands_back_at_once
    script = <<~'RUBY'
      require "tocsin"
      db = Tocsin.open(ARGV[0])
      started = Queue.new
      t = Tocsin.task("long", queue: "q", retries: 0) { started << 1; sleep 600 }
      id = db.queue("q").call("long", max_attempts: 1).job_id
      w = Tocsin::Worker.new(db, queues: ["q"], shutdown_timeout: 600, tasks: { "long" => t })
      Thread.new do
        started.pop
        Process.kill(:TERM, Process.pid)
        sleep 0.1 until w.stopping?
        Process.kill(:TERM, Process.pid)
      end
      w.run(trap_signals: true)
      j = db.queue("q").get(id)
      puts [j.state, j.attempts, j.max_attempts].inspect
    RUBY
    out, err, st = Open3.capture3("timeout", "-s", "KILL", "20", *ruby_cmd("-e", script, @path))
    assert st.success?, "#{st.inspect}\n#{out}\n#{err}"
    assert_equal %(["pending", 1, 2]\n), out
  end
end
