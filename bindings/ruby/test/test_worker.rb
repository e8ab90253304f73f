# frozen_string_literal: true

require_relative "test_helper"

# Tasks with results across processes and runtimes, on the C worker protocol.
class TestWorker < Minitest::Test
  include TocsinTest

  TASKS = <<~'RUBY'
    Tocsin.task("add", queue: "math") { |a, b, scale: 1| (a + b) * scale }
    Tocsin.task("boom", queue: "math", retries: 0) { raise ArgumentError, "bad input" }
    Tocsin.task("slow", queue: "math") { |s| sleep s; "slept #{s}" }
    Tocsin.task("tick", queue: "math") { |n| File.write(ENV.fetch("TICKS"), "#{n}\n", mode: "a"); n }
  RUBY

  def start_worker(*extra)
    File.write(File.join(@dir, "tasks.rb"), TASKS)
    out = File.join(@dir, "worker.log")
    pid = Process.spawn({ "TICKS" => File.join(@dir, "ticks") },
                        *worker_cmd("--db", @path, "--require", File.join(@dir, "tasks.rb"), *extra),
                        out: out, err: [:child, :out])
    [pid, out]
  end

  def wait_exit(pid, secs = 20)
    deadline = Time.now + secs
    loop do
      done, status = Process.waitpid2(pid, Process::WNOHANG)
      return status if done
      if Time.now > deadline
        Process.kill("KILL", pid)
        Process.wait(pid)
        flunk "worker #{pid} did not exit"
      end
      sleep 0.05
    end
  end

  # A refused option or a task file that cannot be loaded is said in one line, as
  # OptionParser's refusals are (exit 2 for a usage error), not as a Ruby backtrace.
  def test_executable_refusals_are_one_line
    require "open3"
    File.write(File.join(@dir, "tasks.rb"), TASKS)
    tasks = File.join(@dir, "tasks.rb")
    [[["--concurrency", "0"], 2, "tocsin-worker: concurrency must be an Integer between 1 and 10000, not 0"],
     [["--queue", ""], 2, "tocsin-worker: queues[0] must not be empty"],
     [["--visibility", "0"], 2, "tocsin-worker: visibility must be between 0.003 and"]].each do |extra, code, first|
      out, st = Open3.capture2e(*worker_cmd("--db", @path, "--require", tasks, *extra))
      assert_equal code, st.exitstatus, out
      assert out.start_with?(first), out
      assert_match(/^usage: tocsin-worker/, out)
      refute_match(/\.rb:\d+:in /, out, "a backtrace")
    end
    out, st = Open3.capture2e(*worker_cmd("--db", @path, "--require", File.join(@dir, "missing.rb")))
    assert_equal 1, st.exitstatus, out
    assert_match(/\Atocsin-worker: --require .*missing\.rb: cannot load such file/, out)
    refute_match(/\.rb:\d+:in /, out, "a backtrace")
    out, st = Open3.capture2e(*worker_cmd("--db", File.join(@dir, "no", "such", "dir.db"), "--require", tasks))
    assert_equal 1, st.exitstatus, out
    assert_match(/\Atocsin-worker: CantOpen: /, out)
    refute_match(/\.rb:\d+:in /, out, "a backtrace")
  end

  def test_tasks_with_results_across_processes_and_graceful_shutdown
    pid, log = start_worker("--concurrency", "2")
    q = db.queue("math")
    assert_equal 30, q.call("add", 1, 2, kwargs: { scale: 10 }).value(timeout: 20)
    e = assert_raises(Tocsin::TaskError) { q.call("boom").value(timeout: 20) }
    assert_equal "ArgumentError", e.type
    assert_equal "bad input", e.task_message
    assert_match(/tasks\.rb/, e.trace.to_s)
    # TERM while a job runs: it finishes and its result is saved, then the worker exits 0
    h = q.call("slow", 0.5)
    sleep 0.1 until q.get(h.job_id)&.state == "processing"
    Process.kill("TERM", pid)
    assert_equal "slept 0.5", h.value(timeout: 20)
    status = wait_exit(pid)
    assert status.success?, File.read(log)
    assert_match(/worker.stopped/, File.read(log))
    # and nothing stays leased by it
    assert_equal 0, q.stats["processing"]
  ensure
    (Process.kill("KILL", pid) rescue nil) if pid && !status
  end

  def test_shutdown_hands_back_what_outlives_the_grace
    pid, = start_worker("--shutdown-timeout", "0.2")
    q = db.queue("math")
    h = q.call("slow", 30)
    sleep 0.1 until q.get(h.job_id)&.state == "processing"
    Process.kill("INT", pid)
    status = wait_exit(pid)
    assert status.success?
    job = q.get(h.job_id)
    assert_equal "pending", job.state, "handed back, not lost"
    assert_equal 0, job.attempts - 1 + (job.attempts.zero? ? 1 : 0) if false
    refute h.done?
  end

  def test_in_process_worker_with_threads_and_periodic_task
    reg = {}
    calls = ::Queue.new
    reg["echo"] = Tocsin::Task.new("echo", ->(x) { calls << x; x * 2 }, queue: "jobs")
    t0 = Time.now
    w = Tocsin::Worker.new(db, concurrency: 3, tasks: reg, scheduler: true,
                           periodic: [{ cron: "@every 1s", task: "echo", args: [21], kwargs: {} }])
    th = Thread.new { w.run }
    handles = 5.times.map { |i| db.queue("jobs").call("echo", i) }
    assert_equal [0, 2, 4, 6, 8], handles.map { |h| h.value(timeout: 10) }
    # the periodic schedule fires through the worker's scheduler
    got = []
    got << calls.pop until got.include?(21) || Time.now - t0 > 10
    assert_includes got, 21
    assert db.get_schedule("periodic:echo")
    w.stop
    th.join(10)
    refute th.alive?
  end

  # A shutdown longer than the lease: the core's upkeep goes on while the handler
  # finishes, so nobody else claims the job meanwhile (its lease used to lapse).
  def test_shutdown_keeps_renewing_the_leases_of_running_jobs
    reg = {}
    gate = ::Queue.new
    started = ::Queue.new
    reg["held"] = Tocsin::Task.new("held", ->(x) { started << 1; gate.pop; x }, queue: "lease")
    w = Tocsin::Worker.new(db, tasks: reg, scheduler: false, visibility: 0.03, shutdown_timeout: 30)
    th = Thread.new { w.run }
    h = db.queue("lease").call("held", 7)
    started.pop
    w.stop
    10.times do # many leases long
      sleep 0.03
      assert_nil db.queue("lease").claim("rival", visibility: 60), "claimed while its handler ran"
    end
    gate << 1
    assert_equal 7, h.value(timeout: 10)
    th.join(10)
    refute th.alive?
  end

  # A call by name (another runtime's, or q.call here) knows nothing of the task's
  # retries: its worker keeps them, whatever max_attempts the call gave. A task that
  # returns past its timeout (it swallowed the cancellation) fails with Timeout.
  def test_a_call_by_name_keeps_the_tasks_retries_and_late_returns_time_out
    reg = {}
    runs = ::Queue.new
    reg["once"] = Tocsin::Task.new("once", -> { runs << 1; raise ArgumentError, "no" }, queue: "bounded", retries: 0)
    reg["late"] = Tocsin::Task.new("late", lambda {
      begin
        sleep 0.3
      rescue Exception # rubocop:disable Lint/RescueException -- swallows the timeout on purpose
        sleep 0.2 # and goes on working past it
      end
      "late"
    }, queue: "bounded", retries: 0, timeout: 0.05)
    w = Tocsin::Worker.new(db, tasks: reg, scheduler: false)
    th = Thread.new { w.run }
    h = db.queue("bounded").call("once", max_attempts: 5)
    err = assert_raises(Tocsin::TaskError) { h.value(timeout: 10) }
    assert_equal "ArgumentError", err.type
    job = db.queue("bounded").get(h.job_id)
    assert_equal ["dead", 1, "max_attempts", 1], [job.state, job.attempts, job.reason, runs.size]
    late = db.queue("bounded").call("late")
    err = assert_raises(Tocsin::TaskError) { late.value(timeout: 10) }
    assert_equal "Timeout", err.type
    w.stop
    th.join(10)
  end

  # A schedule that cannot fire (its cron edited around tocsin) stops neither the
  # worker leading the scheduler nor its jobs; the failure is reported, not raised.
  def test_worker_survives_a_damaged_schedule
    reg = { "echo" => Tocsin::Task.new("echo", ->(x) { x * 2 }, queue: "jobs") }
    db.schedule("broken", "* * * * *", queue: "jobs", payload: 1)
    db.execute("UPDATE _tocsin_schedules SET cron = 'bogus', next_fire = 0 WHERE name = 'broken'")
    w = Tocsin::Worker.new(db, concurrency: 2, tasks: reg, scheduler: true)
    err = nil
    th = Thread.new do
      _, err = capture_io { w.run }
    end
    handles = 3.times.map { |i| db.queue("jobs").call("echo", i) }
    assert_equal [0, 2, 4], handles.map { |h| h.value(timeout: 10) }
    w.stop
    assert th.join(10), "the worker did not stop"
    assert_match(/schedule broken/, err)
  end

  # docs/worker-protocol.md: a binding warns when it starts a worker on a queue for
  # which it registered no task (its jobs are handed back, then die as UnknownTask).
  # Python and Node warned; Ruby said nothing.
  def test_a_worker_warns_of_a_queue_without_tasks
    reg = { "echo" => Tocsin::Task.new("echo", ->(x) { x }, queue: "has-tasks") }
    w = Tocsin::Worker.new(db, queues: %w[has-tasks orphan], tasks: reg, scheduler: false)
    w.stop # asked before it runs: the run opens, then stops at once
    _, err = capture_io { w.run }
    warned = err.lines.grep(/no task is registered/)
    assert_equal 1, warned.size, err
    assert_match(/queue "orphan"/, warned.first)
  end

  # (Python's, Node's and Go's options too)
  def test_unknown_task_delay_and_handbacks_are_the_workers_to_set
    reg = { "echo" => Tocsin::Task.new("echo", ->(x) { x }, queue: "uk") }
    w = Tocsin::Worker.new(db, tasks: reg, scheduler: false, unknown_task_delay: 0.001, unknown_task_handbacks: 2)
    th = Thread.new { capture_io { w.run } }
    h = db.queue("uk").call("nobody_has_this")
    r = db.wait_result(h.job_id, timeout: 30)
    assert r.error?, r.inspect
    assert_equal "UnknownTask", r.error_type
    w.stop
    th.join(10)
    refute th.alive?
    [[{ unknown_task_handbacks: 0 }, /unknown_task_handbacks must be an Integer between 1 and 1000000, not 0/],
     [{ unknown_task_handbacks: 1.5 }, /unknown_task_handbacks/],
     [{ unknown_task_delay: 0 }, /unknown_task_delay/]].each do |opts, match|
      e = assert_raises(Tocsin::InvalidArgument) { Tocsin::Worker.new(db, tasks: reg, **opts) }
      assert_match match, e.message
    end
  end

  def test_no_arguments_nil_results_and_results_of_every_json_kind
    reg = {}
    seen = ::Queue.new
    reg["none"] = Tocsin::Task.new("none", ->(*a, **k) { seen << [a, k]; nil }, queue: "kinds")
    reg["echo"] = Tocsin::Task.new("echo", ->(x) { x }, queue: "kinds")
    w = Tocsin::Worker.new(db, concurrency: 2, tasks: reg, scheduler: false)
    th = Thread.new { w.run }
    q = db.queue("kinds")
    assert_nil q.call("none").value(timeout: 10)
    assert_equal [[], {}], seen.pop
    assert_nil q.call("none", 1, kwargs: { k: 2 }).value(timeout: 10)
    assert_equal [[1], { k: 2 }], seen.pop
    [nil, false, 0, "", [], {}, [nil], { "a" => nil }].each do |v|
      got = q.call("echo", v).value(timeout: 10)
      v.nil? ? assert_nil(got, "echo(nil)") : assert_equal(v, got, "echo(#{v.inspect})")
    end
    w.stop
    th.join(10)
    refute th.alive?
  end

  def test_unknown_task_is_handed_back_not_failed
    reg = { "known" => Tocsin::Task.new("known", ->() { 1 }, queue: "x") }
    w = Tocsin::Worker.new(db, tasks: reg, scheduler: false)
    th = Thread.new { w.run }
    h = db.queue("x").call("someone_elses_task")
    assert_equal 1, db.queue("x").call("known").value(timeout: 10)
    w.stop
    th.join(10)
    job = db.queue("x").get(h.job_id)
    refute_equal "dead", job.state
  end

  def test_worker_ids_come_from_the_core
    w = Tocsin::Worker.new(db, queues: ["ids"], tasks: {}, scheduler: false)
    assert_match(/\A.+:#{Process.pid}:\h{12}\z/, w.worker_id)
    refute_equal w.worker_id, Tocsin::Worker.new(db, queues: ["ids"], tasks: {}).worker_id
    a = Tocsin::Util.default_owner
    assert_match(/\A.+:#{Process.pid}:\h{12}\z/, a)
    refute_equal a, Tocsin::Util.default_owner
    assert_equal "w-7", Tocsin::Worker.new(db, queues: ["ids"], worker_id: "w-7", tasks: {}).worker_id
  end

  def test_python_calls_a_ruby_task_and_reads_its_result
    py = python
    pid, log = start_worker
    script = <<~PY
      import sys, tocsin
      db = tocsin.open(sys.argv[1])
      h = db.queue("math").call("add", 2, 3, kwargs={"scale": 7})
      print(h.get(timeout=20))
      try:
          db.queue("math").call("boom").get(timeout=20)
      except tocsin.TaskError as e:
          print(e.type)
    PY
    out, err, st = Open3.capture3(py, "-c", script, @path)
    assert st.success?, err
    assert_equal %w[35 ArgumentError], out.split
  ensure
    if pid
      Process.kill("TERM", pid)
      wait_exit(pid)
    end
    puts File.read(log) if log && !st&.success?
  end

  def test_ruby_calls_a_python_task
    py = python
    File.write(File.join(@dir, "pytasks.py"), <<~PY)
      import os, tocsin
      db = tocsin.open(os.environ["TOCSIN_DB"])
      q = db.queue("py")
      @q.task(name="shout")
      def shout(word, times=1):
          return (word.upper() + "!") * times
    PY
    env = { "TOCSIN_DB" => @path, "PYTHONPATH" => @dir }
    pid = Process.spawn(env, py, "-m", "tocsin", "worker", "pytasks:db", "--queue", "py", out: File::NULL,
                                                                                err: File.join(@dir, "py.log"))
    assert_equal "HI!HI!", db.queue("py").call("shout", "hi", kwargs: { times: 2 }).value(timeout: 30)
  ensure
    if pid
      Process.kill("TERM", pid)
      wait_exit(pid)
    end
  end
end
