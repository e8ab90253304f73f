# frozen_string_literal: true

require_relative "test_helper"

# Regressions of a third review: values nested deeper than JSON.parse's default
# bound, a task that exits, the sqlite3-gem helpers' errors, a worker whose
# database closes under it, enqueue_many's job specs.

# Values another runtime wrote nested 150 deep (the core allows 1000): every
# reader hands them out. JSON.parse's default max_nesting (100) raised
# JSON::NestingError at each of them before.
class TestDeepValues < Minitest::Test
  include TocsinTest

  DEPTH = 150

  def deep_json(n = DEPTH) = "#{"[" * n}\"leaf\"#{"]" * n}"

  def depth(v)
    n = 0
    while v.is_a?(Array)
      n += 1
      v = v[0]
    end
    assert_equal "leaf", v
    n
  end

  def test_jobs_events_notifications_and_results_nested_150_deep_are_read
    q = db.queue("q")
    id = db.native.enqueue("q", deep_json, nil)
    assert_equal DEPTH, depth(q.get(id).payload)
    job = q.claim("w")
    assert_equal DEPTH, depth(job.payload)
    job.ack

    db.native.publish("s", deep_json, nil, nil)
    assert_equal DEPTH, depth(db.stream("s").read.first.payload)
    got = nil
    db.stream("s").subscribe(consumer: "c", timeout: 0.2) { |e| got = e.payload }
    assert_equal DEPTH, depth(got)
    assert_equal 1, db.stream("s").offset("c"), "the consumer moved past the event"

    db.native.notify("n", deep_json, nil)
    assert_equal DEPTH, depth(db.notifications("n").first.payload)

    db.native.result_save(id, deep_json, nil)
    assert_equal DEPTH, depth(db.result(id).value)
  end

  def test_a_worker_runs_a_task_whose_arguments_nest_150_deep
    tasks = { "depth" => Tocsin::Task.new("depth", ->(v) { depth(v) }, queue: "w", retries: 0) }
    w = Tocsin::Worker.new(db, tasks: tasks, scheduler: false)
    runner = Thread.new { w.run }
    id = db.native.task_enqueue("w", "depth", "[#{deep_json}]", "{}", nil, nil, nil)
    assert_equal DEPTH, Tocsin::TaskHandle.new(db, id).value(timeout: 30)
  ensure
    w&.stop
    runner&.join
  end

  # What the core stores (1000 levels) is written back too: a task returning the
  # value it was given, a payload forwarded. The writer refused more than 100
  # (JSON.generate's default, and the check before it): a Ruby task could not
  # echo what a Python or Node caller sent, and died SerializationError.
  def test_values_nested_to_the_cores_bound_are_written_back
    q = db.queue("q")
    id = db.native.enqueue("q", deep_json(1000), nil)
    v = q.get(id).payload
    assert_equal 1000, depth(v)
    assert_equal 1000, depth(q.get(q.enqueue(v)).payload)
    e = assert_raises(Tocsin::InvalidArgument) { q.enqueue([v]) }
    assert_match(/is nested deeper than 1000 levels/, e.message)

    tasks = { "echo" => Tocsin::Task.new("echo", ->(x) { x }, queue: "w", retries: 0) }
    w = Tocsin::Worker.new(db, tasks: tasks, scheduler: false)
    runner = Thread.new { w.run }
    id = db.native.task_enqueue("w", "echo", "[#{deep_json(998)}]", "{}", nil, nil, nil)
    assert_equal 998, depth(Tocsin::TaskHandle.new(db, id).value(timeout: 30))
  ensure
    w&.stop
    runner&.join
  end
end

# A task that ends other than by a StandardError -- exit (SystemExit), Interrupt,
# NoMemoryError, its thread killed (Thread.exit) -- is a failed run like any
# other: before, the run's thread died with no outcome recorded (the job leased
# and renewed forever, its slot lost: with concurrency 1 nothing ran again), a
# SystemExit went on to the main thread, and Database#close could wait forever.
class TestTaskEndings < Minitest::Test
  include TocsinTest

  CHILD = <<~'RUBY'
    require "tocsin"
    Thread.report_on_exception = false
    Thread.new { sleep 60; warn "ran past 60 s"; exit! 5 }
    kinds = { "exit" => -> { exit 3 }, "interrupt" => -> { raise Interrupt }, "nomem" => -> { raise NoMemoryError, "no room" },
              "thread_exit" => -> { Thread.exit }, "ok" => -> { "ok" } }
    tasks = kinds.to_h { |n, f| [n, Tocsin::Task.new(n, f, queue: "w", retries: 0)] }
    db = Tocsin.open(ARGV[0])
    w = Tocsin::Worker.new(db, tasks: tasks, concurrency: 1, scheduler: false)
    runner = Thread.new do
      w.run
    rescue Tocsin::Closed
      nil
    end
    ids = []
    out = %w[exit ok interrupt ok nomem ok thread_exit ok].map do |n|
      h = tasks[n].call_async(db)
      ids << h.job_id
      begin
        h.value(timeout: 20)
      rescue Tocsin::TaskError => e
        "#{e.type}: #{e.task_message}"
      end
    end
    puts out.inspect
    puts ids.map { |id| db.queue("w").get(id)&.state }.uniq.inspect
    puts [w.in_flight, w.failed].inspect
    db.close # stops the worker
    puts runner.join(10) ? "ended" : "hung"
  RUBY

  def test_exit_interrupt_nomemory_and_a_killed_thread_fail_the_run_and_the_worker_goes_on
    out, err, st = Open3.capture3(*ruby_cmd("-e", CHILD, @path))
    assert st.success?, "#{st.inspect}\n#{out}\n#{err}"
    lines = out.lines.map(&:chomp)
    assert_equal ["SystemExit: exit", "ok", "Interrupt: Interrupt", "ok", "NoMemoryError: no room", "ok",
                  "Killed: the task's thread was killed before the run ended (Thread#kill, Thread.exit)", "ok"].inspect,
                 lines[0], err
    assert_equal ["dead", nil].inspect, lines[1], "the failed jobs are dead (retries: 0), the others done"
    assert_equal [0, 4].inspect, lines[2]
    assert_equal "ended", lines[3]
  end

  # The worker's own kill at shutdown (a task that outlives shutdown_timeout,
  # even ignoring its JobCancelled) hands the job back: no attempt consumed, no
  # "Killed" failure.
  def test_a_task_killed_at_shutdown_is_handed_back
    started = ::Queue.new
    stubborn = lambda do
      started << true
      loop do
        sleep 10
      rescue Tocsin::JobCancelled
        nil
      end
    end
    tasks = { "stubborn" => Tocsin::Task.new("stubborn", stubborn, queue: "w", retries: 0) }
    w = Tocsin::Worker.new(db, tasks: tasks, scheduler: false, shutdown_timeout: 0)
    runner = Thread.new { w.run }
    h = tasks["stubborn"].call_async(db)
    started.pop
    w.stop
    runner.join
    job = db.queue("w").get(h.job_id)
    assert_equal "pending", job.state
    assert_equal [1, 2], [job.attempts, job.max_attempts], "a hand-back: the claim is not an attempt spent"
    refute_match(/Killed/, job.last_error.to_s)
    assert_equal 0, w.failed
  end
end

# Database#close under a running worker stops it gracefully, and its #run then
# raises Tocsin::Closed (Go's Run returns ErrClosed; it returned normally, as
# after #stop); a worker stopped first still returns.
class TestWorkerOnClose < Minitest::Test
  include TocsinTest

  def start_worker
    tasks = { "t" => Tocsin::Task.new("t", -> { 1 }, queue: "q") }
    w = Tocsin::Worker.new(db, tasks: tasks, scheduler: false)
    runner = Thread.new { w.run }
    assert_equal 1, tasks["t"].call_async(db).value(timeout: 30), "the worker runs"
    [w, runner]
  end

  def test_run_raises_closed_when_the_database_is_closed_under_it
    w, runner = start_worker
    db.close
    e = assert_raises(Tocsin::Closed) { runner.value }
    assert_match(/the database was closed while the worker ran/, e.message)
    assert_equal 0, w.in_flight
  end

  def test_run_returns_when_stopped_before_the_close
    w, runner = start_worker
    w.stop
    assert_same w, runner.value
    db.close
  end
end

# Tocsin::SQL (tocsin inside the sqlite3 gem's own transaction) raises the
# Tocsin::Error of each failure, as Tocsin.open's calls do: it let the driver's
# SQLite3::SQLException (an empty queue name) or ArgumentError ("prepare
# called on a closed database") through. (In a child process: with the
# loadable extension and tocsin_native both in a process, a later fork() of it
# hangs in the core's fork handlers -- a defect of the core, not checked here.)
class TestSQLHelperErrors < Minitest::Test
  include TocsinTest

  CHILD = <<~'RUBY'
    require "sqlite3"
    require "tocsin"
    require "tocsin/sql"
    path = ARGV[0]
    db = Tocsin.open(path)
    bad = []
    refused = lambda do |cls, pattern, &call|
      call.call
      bad << "#{pattern.inspect}: nothing raised"
    rescue Exception => e # rubocop:disable Lint/RescueException
      ok = e.instance_of?(cls) && e.message.match?(pattern) &&
           (cls == Tocsin::Closed || e.cause.is_a?(SQLite3::Exception))
      bad << "#{pattern.inspect}: #{e.class}: #{e.message} (cause #{e.cause.class})" unless ok
      e
    end
    conn = SQLite3::Database.new(path)
    conn.busy_timeout = 5000
    Tocsin::SQL.load(conn)
    env = db.task_envelope("t")
    # refusals of the SQL functions, inside the application's transaction: nothing is written
    conn.transaction do
      refused.(Tocsin::InvalidArgument, /queue name must not be empty/) { Tocsin::SQL.enqueue(conn, "", 1) }
      refused.(Tocsin::InvalidArgument, /max_attempts/) { Tocsin::SQL.enqueue(conn, "q", 1, max_attempts: 0) }
      refused.(Tocsin::InvalidArgument, /queue name must not be empty/) { Tocsin::SQL.enqueue_envelope(conn, "", env) }
      refused.(Tocsin::InvalidArgument, /not valid JSON/) { Tocsin::SQL.enqueue_envelope(conn, "q", "nope") }
      refused.(Tocsin::InvalidArgument, /channel must not be empty/) { Tocsin::SQL.notify(conn, "", 1) }
      refused.(Tocsin::InvalidArgument, /topic must not be empty/) { Tocsin::SQL.publish(conn, "", 1) }
      e = refused.(Tocsin::TooBig, /the limit is/) { Tocsin::SQL.enqueue(conn, "q", "x" * (2 << 20)) }
      bad << "the sqlite_code of a #{e.class}" unless e.is_a?(Tocsin::Error) && e.sqlite_code == 18 # SQLITE_TOOBIG
    end
    bad << "a job was written" unless db.stats.empty?
    bad << "a notification was written" unless db.notify_max_id.zero?
    # a connection without the functions: says to load them
    bare = SQLite3::Database.new(":memory:")
    refused.(Tocsin::InvalidArgument, /no such function: tocsin_enqueue .*Tocsin::SQL.load/) { Tocsin::SQL.enqueue(bare, "q", 1) }
    # every helper on a closed connection
    c = SQLite3::Database.new(path)
    Tocsin::SQL.load(c)
    c.close
    [-> { Tocsin::SQL.enqueue(c, "q", 1) }, -> { Tocsin::SQL.enqueue(c, "q", 1, priority: 2) },
     -> { Tocsin::SQL.enqueue_envelope(c, "q", env) }, -> { Tocsin::SQL.notify(c, "c", 1) },
     -> { Tocsin::SQL.publish(c, "s", 1) }, -> { Tocsin::SQL.load(c) }].each do |call|
      refused.(Tocsin::Closed, /the connection is closed/) { call.call }
    end
    puts bad.empty? ? "ok" : bad
  RUBY

  def test_every_helper_raises_the_tocsin_error_of_its_failure
    out, err, st = Open3.capture3("timeout", "-s", "KILL", "60", *ruby_cmd("-e", CHILD, @path))
    assert st.success?, "#{st.inspect}\n#{out}\n#{err}"
    assert_equal "ok", out.strip, err
  end
end

# enqueue_many: a Hash with a payload key is a job spec whether the key is the
# Symbol or the String (a "payload" String key was stored as the payload itself,
# its options with it, while :payload was read as a spec).
class TestEnqueueManySpecs < Minitest::Test
  include TocsinTest

  def test_payload_as_a_symbol_or_a_string_key_is_a_job_spec
    q = db.queue("q")
    ids = q.enqueue_many([{ payload: 1, priority: 5 }, { "payload" => 2, "priority" => 7 },
                          { "payload" => 3, priority: 9 }, { "to" => "ann" },
                          { payload: { "payload" => "own key" } }])
    jobs = ids.map { |id| q.get(id) }
    assert_equal [1, 2, 3, { "to" => "ann" }, { "payload" => "own key" }], jobs.map(&:payload)
    assert_equal [5, 7, 9, 0, 0], jobs.map(&:priority)
  end

  def test_an_option_given_as_both_a_symbol_and_a_string_is_refused
    q = db.queue("q")
    e = assert_raises(Tocsin::InvalidArgument) { q.enqueue_many([1, { payload: 1, "payload" => 2 }]) }
    assert_equal "jobs[1] gives :payload twice (as a Symbol and a String key)", e.message
    e = assert_raises(Tocsin::InvalidArgument) { q.enqueue_many([{ "payload" => 1, priority: 1, "priority" => 2 }]) }
    assert_match(/jobs\[0\] gives :priority twice/, e.message)
    e = assert_raises(Tocsin::InvalidArgument) { q.enqueue_many([{ "payload" => 1, "bogus" => 2 }]) }
    assert_match(/jobs\[0\]: unknown job option\(s\): :bogus/, e.message)
    assert_equal [], db.stats, "nothing was written"
  end
end

# A task error whose message holds a NUL byte, or is not valid UTF-8, ends its
# run as the same error in every runtime (Go's worker gives it so): the NUL
# dropped, a broken byte U+FFFD. The native finish refused it before: the run
# was never recorded, its job leased until the worker stopped.
class TestErrorTexts < Minitest::Test
  include TocsinTest

  def test_an_error_message_with_a_nul_or_a_broken_byte_ends_the_run
    tasks = {
      "nul" => Tocsin::Task.new("nul", -> { raise ArgumentError, "bad\0tail" }, queue: "w", retries: 0),
      "bin" => Tocsin::Task.new("bin", -> { raise "caf\xC3".b + "!" }, queue: "w", retries: 0),
    }
    w = Tocsin::Worker.new(db, tasks: tasks, scheduler: false)
    runner = Thread.new { w.run }
    got = %w[nul bin].map do |n|
      tasks[n].call_async(db).value(timeout: 30)
    rescue Tocsin::TaskError => e
      [e.type, e.task_message]
    end
    assert_equal [%w[ArgumentError badtail], ["RuntimeError", "caf\uFFFD!"]], got
    assert_equal 0, db.queue("w").stats["processing"]
  ensure
    w&.stop
    runner&.join
  end
end
