# frozen_string_literal: true

require_relative "test_helper"
require "pathname"
require "tocsin/sql"

# Every public method checks its arguments: a bad one (nil where a name is
# needed, a non-Array batch, a non-Hash option, a Float or a boolean where an
# Integer is, a String where a duration is) is a Tocsin::InvalidArgument naming
# the argument -- never Ruby's TypeError or NoMethodError from deeper down --
# raised before anything is written.
class TestArguments < Minitest::Test
  include RefusalFixture

  def refused(what, &call)
    e = assert_raises(Tocsin::InvalidArgument, "#{what.inspect} at #{call.source_location.inspect}", &call)
    assert_match what, e.message, "at #{call.source_location.inspect}"
    assert_equal Tocsin::InvalidArgument::CODE, e.code
    e
  end

  def fixture = db.queue("q").enqueue("b")

  def test_database_and_open
    refused(/path must be a String or Pathname, not nil/) { Tocsin.open(nil) }
    refused(/path must be a String or Pathname, not Integer/) { Tocsin.open(5) }
    refused(/read_only must be true or false, not String/) { Tocsin.open(@path, read_only: "yes") }
    refused(/check_sqlite must be true or false, not nil/) { Tocsin.open(@path, check_sqlite: nil) }
    refused(/max_payload must be an Integer, not Float/) { Tocsin.open(@path, max_payload: 1.5) }
    refused(/busy_timeout must be a number of seconds, not nil/) { Tocsin.open(@path, busy_timeout: nil) }
    refused(/busy_timeout must be a number of seconds, not true/) { Tocsin.open(@path, busy_timeout: true) }
    Tocsin.open(Pathname.new(@path)) { |d| assert_equal @path, d.path }

    refused(/queue name must be a String or Symbol, not nil/) { db.queue(nil) }
    refused(/queue name must be a String or Symbol, not Integer/) { db.queue(1) }
    refused(/topic must be a String or Symbol, not nil/) { db.stream(nil) }
    refused(/sql must be a String, not nil/) { db.execute(nil) }
    refused(/sql must be a String, not Object/) { db.transaction { |tx| tx.execute(Object.new) } }
    refused(/must be a Time or epoch milliseconds/) { db.set_time(true) }
    refused(/max_payload must be an Integer, not true/) { db.max_payload = true }
    refused(/tx: must be a Tocsin::Transaction, not String/) { db.notify("c", 1, tx: "tx") }
    refused(/cron must be a String, not nil/) { Tocsin.cron_next(nil) }
    refused(/after must be a Time or epoch milliseconds \(Integer\), not Float/) { Tocsin.cron_next("* * * * *", after: 1.5) }
    refused(/local_time must be true or false, not Integer/) { Tocsin.cron_next("* * * * *", local_time: 1) }
    refused(/attempts must be an Integer, not true/) { Tocsin.backoff_ms(true) }
    refused(/timeout must be a number of seconds, not String/) { db.subscribe.wait("1") }
  end

  def test_notify_listen_and_results
    refused(/channel must be a String or Symbol, not nil/) { db.notify(nil, 1) }
    refused(/meta must be a Hash, not Array/) { db.notify("c", 1, meta: [1]) }
    refused(/channel must be a String or Symbol, not nil/) { db.notifications(nil) }
    refused(/after must be an Integer, not true/) { db.notifications("c", after: true) }
    refused(/channel must be a String or Symbol, not nil/) { db.listen(nil) }
    refused(/buffer_size must be an Integer, not true/) { db.listen("c", buffer_size: true) }
    refused(/timeout must be a number of seconds, not String/) { db.listen("c", timeout: "1") { flunk } }
    l = db.listen("c")
    refused(/timeout must be a number of seconds, not true/) { l.next_batch(timeout: true) }
    refused(/timeout must be a number of seconds, not String/) { l.each(timeout: "1") }
    l.close

    refused(/job id must be an Integer, not true/) { db.save_result(true, 1) }
    refused(/job id must be an Integer, not false/) { db.save_result(false, 1) }
    refused(/type must be a String, not nil/) { db.save_error(@job.id, nil) }
    refused(/message must be a String, not Integer/) { db.save_error(@job.id, "T", 5) }
    refused(/ttl must be a number of seconds, not String/) { db.save_error(@job.id, "T", "m", ttl: "1") }
    refused(/job id must be an Integer, not Float/) { db.result(1.0) }
    refused(/job id must be an Integer, not nil/) { db.delete_result(nil) }
    refused(/job id must be an Integer, not true/) { db.wait_result(true, timeout: 0) }
    refused(/job id must be an Integer, not Float/) { db.wait_result(@job.id.to_f, timeout: 0) }
    refused(/timeout must be a number of seconds, not String/) { Tocsin::TaskHandle.new(db, @job.id).value(timeout: "1") }
  end

  def test_locks_rate_limits_and_schedules
    refused(/lock name must be a String or Symbol, not nil/) { db.lock(nil) }
    refused(/ttl must be a number of seconds, not nil/) { db.lock("l", ttl: nil) }
    refused(/owner must be a String or Symbol, not Integer/) { db.lock("l", owner: 5) }
    refused(/with_lock takes a block/) { db.with_lock("l") }
    refused(/timeout must be a number of seconds, not String/) { db.with_lock("l", timeout: "x") { flunk } }
    refused(/lock name must be a String or Symbol, not nil/) { db.lock_holder(nil) }
    lock = db.lock("l")
    refused(/timeout must be a number of seconds, not String/) { lock.acquire(timeout: "1") }
    refused(/ttl must be a number of seconds, not String/) { lock.renew(ttl: "1") }

    refused(/rate limit name must be a String or Symbol, not nil/) { db.rate_limit(nil, limit: 1, per: 1) }
    refused(/limit must be an Integer, not Float/) { db.rate_limit("r", limit: 1.5, per: 1) }
    refused(/limit must be an Integer, not true/) { db.rate_limit("r", limit: true, per: 1) }
    refused(/per must be a number of seconds, not nil/) { db.rate_limit("r", limit: 1, per: nil) }

    cron = "*/5 * * * *"
    refused(/schedule name must be a String or Symbol, not nil/) { db.schedule(nil, cron, queue: "q") }
    refused(/cron must be a String, not nil/) { db.schedule("s", nil, queue: "q") }
    refused(/queue must be a String or Symbol, not nil/) { db.schedule("s", cron, queue: nil) }
    refused(/priority must be an Integer, not Float/) { db.schedule("s", cron, queue: "q", priority: 1.5) }
    refused(/max_attempts must be an Integer, not true/) { db.schedule("s", cron, queue: "q", max_attempts: true) }
    refused(/local_time must be true or false, not String/) { db.schedule("s", cron, queue: "q", local_time: "yes") }
    refused(/catch_up must be :once or :all, not String/) { db.schedule("s", cron, queue: "q", catch_up: "all") }
    refused(/max_catch_up must be an Integer, not true/) { db.schedule("s", cron, queue: "q", max_catch_up: true) }
    refused(/job_expires must be a number of seconds, not String/) { db.schedule("s", cron, queue: "q", job_expires: "1") }
    refused(/unknown schedule option/) { db.schedule("s", cron, queue: "q", bogus: 1) }
    refused(/schedule name must be a String or Symbol, not nil/) { db.update_schedule(nil) }
    refused(/cron must be a String, not Integer/) { db.update_schedule("s", cron: 5) }
    refused(/queue must be a String or Symbol, not Integer/) { db.update_schedule("s", queue: 5) }
    refused(/schedule name/) { db.get_schedule(nil) }
    refused(/schedule name/) { db.pause_schedule(nil) }
    refused(/schedule name/) { db.resume_schedule(1) }
    refused(/schedule name/) { db.unschedule(nil) }

    refused(/notifications_keep must be an Integer, not Float/) { db.prune(notifications_keep: 1.5) }
    refused(/notifications_max_age must be a number of seconds, not true/) { db.prune(notifications_max_age: true) }
    refused(/dead_before must be a Time or epoch milliseconds/) { db.prune(dead_before: "yesterday") }
    refused(/max_age must be a number of seconds, not String/) { db.set_notify_autotrim(max_age: "x") }
    refused(/one_in must be an Integer, not Float/) { db.set_notify_autotrim(one_in: 1.5) }
  end

  def test_queue_and_jobs
    q = db.queue("q")
    refused(/priority must be a 64-bit Integer, not true/) { q.enqueue(1, priority: true) }
    refused(/priority must be a 64-bit Integer, not false/) { q.enqueue(1, priority: false) } # was ignored
    refused(/delay must be a number of seconds, not false/) { q.enqueue(1, delay: false) }    # was ignored
    refused(/delay must be a number of seconds, not true/) { q.enqueue(1, delay: true) }
    refused(/run_at must be a Time or epoch milliseconds \(Integer\), not Float/) { q.enqueue(1, run_at: 1.5e12) }
    refused(/max_attempts must be between 1 and \d+, not Float/) { q.enqueue(1, max_attempts: 2.0) }
    refused(/max_attempts must be between 1 and \d+, not true/) { q.enqueue(1, max_attempts: true) }
    refused(/expires must be a number of seconds, not String/) { q.enqueue(1, expires: "1") }
    refused(/unique_key must be a String, not Integer/) { q.enqueue(1, unique_key: 5) } # was stored as "5"
    refused(/meta must be a Hash, not String/) { q.enqueue(1, meta: "x") }
    refused(/tx: must be a Tocsin::Transaction, not Integer/) { q.enqueue(1, tx: 1) }

    refused(/jobs must be an Array, not nil/) { q.enqueue_many(nil) }
    refused(/jobs must be an Array, not Hash/) { q.enqueue_many({ a: 1 }) }
    refused(/jobs must be an Array, not String/) { q.enqueue_many("abc") }
    refused(/jobs\[0\] priority must be a 64-bit Integer, not String/) { q.enqueue_many([{ payload: 1, priority: "1" }]) }
    refused(/jobs\[1\]: unknown job option\(s\): :bogus/) { q.enqueue_many([1, { payload: 2, bogus: 1 }]) }
    refused(/jobs\[1\] meta must be a Hash/) { q.enqueue_many([1, { payload: 2, meta: 3 }]) }

    refused(/worker_id must be a String or Symbol, not nil/) { q.claim(nil) }
    refused(/visibility must be a number of seconds, not nil/) { q.claim("w", visibility: nil) }
    refused(/claim count must be an Integer, not true/) { q.claim_batch(true, "w") }
    refused(/worker_id must be a String or Symbol, not nil/) { q.claim_batch(1, nil) }
    refused(/not a Job and a token/) { q.ack(@job, 5) }
    refused(/the token is missing/) { q.ack(@job.id) }
    refused(/job id must be an Integer, not true/) { q.ack(true, @job.token) }
    refused(/ack_batch's jobs must be an Array, not nil/) { q.ack_batch(nil) }
    refused(/ack_batch's jobs must be an Array, not String/) { q.ack_batch("x") }
    refused(/the token of ack_batch entry 0 must be an Integer, not true/) { q.ack_batch([[@job.id, true]]) }
    refused(/ack_batch entry 1 must be a Job or an \[id, token\] pair, not Integer/) { q.ack_batch([@job, 5]) }
    refused(/delay must be a number of seconds, not true/) { q.retry(@job, delay: true) }
    refused(/error must be a String, not Object/) { q.retry(@job, error: Object.new) }
    refused(/error must be a String, not Integer/) { q.fail(@job, error: 5) }
    refused(/delay must be a number of seconds, not nil/) { q.hand_back(@job, delay: nil) }
    refused(/extend must be a number of seconds, not nil/) { q.heartbeat(@job, extend: nil) }
    refused(/job id must be an Integer, not nil/) { q.cancel(nil) }
    refused(/job id must be an Integer, not true/) { q.cancel(true) }
    refused(/job id must be an Integer, not nil/) { q.get(nil) }
    refused(/after must be an Integer, not nil/) { q.dead_letters(after: nil) }
    refused(/limit must be an Integer, not Float/) { q.dead_letters(limit: 1.5) }
    refused(/job id must be an Integer, not String/) { q.requeue("1") }
    refused(/before must be a Time or epoch milliseconds/) { q.purge(before: 1.5) }
    refused(/timeout must be a number of seconds, not String/) { q.wait(timeout: "1") }

    # each_job checks everything before its first claim (the queue holds a job)
    refused(/worker_id must be a String or Symbol, not nil/) { q.each_job(nil) }
    refused(/timeout must be a number of seconds, not String/) { q.each_job("w", timeout: "x") { flunk } }
    refused(/timeout must be a number of seconds, not String/) { q.each_job("w", timeout: "x") }
    refused(/batch \(the claim count\) must be an Integer, not Float/) { q.each_job("w", batch: 1.0) { flunk } }
    refused(/visibility must be a number of seconds, not nil/) { q.each_job("w", visibility: nil) { flunk } }

    refused(/task name must be a String or Symbol, not nil/) { q.call(nil) }
    refused(/kwargs must be a Hash, not String/) { q.call("t", kwargs: "x") }
    refused(/kwargs must be a Hash, not Array/) { q.call("t", kwargs: [[:a, 1]]) } # was stored as an array
    refused(/result_ttl must be a number of seconds, not String/) { q.call("t", result_ttl: "1") }
    refused(/timeout must be a number of seconds, not true/) { q.call("t", timeout: true) }
    refused(/task name must be a String or Symbol, not nil/) { db.call(nil) }
    refused(/queue name must be a String or Symbol, not nil/) { db.call("t", queue: nil) }
    refused(/kwargs must be a Hash, not Integer/) { db.task_envelope("t", kwargs: 1) }

    refused(/tx: must be a Tocsin::Transaction, not Integer/) { @job.ack(tx: 1) }
    refused(/delay must be a number of seconds, not String/) { @job.retry(delay: "1") }
    refused(/error must be a String, not Integer/) { @job.fail(error: 1) }
    refused(/extend must be a number of seconds, not String/) { @job.heartbeat(extend: "1") }
    refused(/delay must be a number of seconds, not true/) { @job.hand_back(delay: true) }
    refused(/the lock is not held/) { db.lock("l2").renew }
  end

  def test_streams_and_subscriptions
    s = db.stream("s")
    refused(/key must be a String, not Integer/) { s.publish(1, key: 5) }
    refused(/meta must be a Hash, not Integer/) { s.publish(1, meta: 1) }
    refused(/payloads must be an Array, not nil/) { s.publish_many(nil) }
    refused(/payloads must be an Array, not Hash/) { s.publish_many({ a: 1 }) }
    refused(/keys must be an Array, not String/) { s.publish_many([1], keys: "k") }
    refused(/keys\[0\] must be a String, not Integer/) { s.publish_many([1], keys: [5]) }
    refused(/publish_many: 2 keys for 1 payloads/) { s.publish_many([1], keys: %w[a b]) }
    refused(/after must be an Integer, not true/) { s.read(after: true) }
    refused(/consumer must be a String or Symbol, not nil/) { s.save_offset(nil, 1) }
    refused(/offset must be an Integer, not Float/) { s.save_offset("c", 1.0) }
    refused(/consumer must be a String or Symbol, not nil/) { s.offset(nil) }
    refused(/max_count must be an Integer, not true/) { s.trim(max_count: true) }
    refused(/below_consumers must be true or false, not String/) { s.trim(below_consumers: "yes") }
    refused(/max_age must be a number of seconds, not String/) { s.trim(max_age: "1") }
    refused(/consumer must be a String or Symbol, not Integer/) { s.subscribe(consumer: 5) }
    refused(/from_offset must be an Integer, not Float/) { s.subscribe(from_offset: 1.5) }
    refused(/batch must be an Integer, not true/) { s.subscribe(batch: true) }
    refused(/autosave_every must be an Integer, not Float/) { s.subscribe(consumer: "x", autosave_every: 1.5) }
    refused(/autosave must be a number of seconds, not String/) { s.subscribe(consumer: "x", autosave: "1") }
    refused(/timeout must be a number of seconds, not String/) { s.subscribe(timeout: "1") { flunk } }
    refused(/save_on_close must be true or false, not nil/) { s.subscribe(save_on_close: nil) }
    sub = s.subscribe(consumer: :sym_consumer, from_offset: 0, save_on_close: false) # a Symbol raised TypeError
    refused(/timeout must be a number of seconds, not true/) { sub.next_batch(timeout: true) }
    sub.close
  end

  # What a task or a periodic task declares is checked at the declaration, by the core's
  # rules: Tocsin.task("") and Tocsin.every("bad", ...) were accepted, and every worker
  # of the process then raised in #run (register, schedule_set) -- the registry is global.
  def test_declarations_are_checked_when_declared
    tasks = Tocsin.tasks.dup
    periodic = Tocsin.periodic.dup
    refused(/\Atask name must not be empty\z/) { Tocsin.task("") { 1 } }
    refused(/\Atask name must not be empty\z/) { Tocsin.task(:"") { 1 } }
    refused(/\Atask name must not contain control characters\z/) { Tocsin.task("a\tb") { 1 } }
    refused(/\Atask name is 256 bytes long; the limit is 255\z/) { Tocsin.task("t" * 256) { 1 } }
    refused(/\Atask name is not valid UTF-8\z/) { Tocsin.task("a\xFF".b) { 1 } }
    refused(/\Aqueue must not be empty\z/) { Tocsin.task("t_q", queue: "") { 1 } }
    refused(/\Aqueue must not be empty\z/) { Tocsin::Task.new("t_q", -> {}, queue: "") }
    refused(/\Acron: expected 5 or 6 fields/) { Tocsin.every("bad", "t") }
    refused(/never fires/) { Tocsin.every("0 0 31 2 *", "t") }
    refused(/\Atask name must not be empty\z/) { Tocsin.every("* * * * *", "") }
    assert_equal tasks, Tocsin.tasks
    assert_equal periodic, Tocsin.periodic
    # the longest name is a name
    t = Tocsin::Task.new("t" * 255, -> {}, queue: "q" * 255)
    assert_equal 255, t.name.bytesize
  end

  # A schedule's count of 0 (the core's "the default") and a subscription's
  # from_offset of -1 (its "the saved offset") or autosave_every of 0 (its "none")
  # are refused, as in Python and Node: leave the option out for those.
  def test_counts_the_core_reads_as_default
    refused(/\Amax_attempts must be between 1 and 1000000, not 0\z/) do
      db.schedule("s", "* * * * *", queue: "q", max_attempts: 0)
    end
    refused(/\Amax_catch_up must be between 1 and 100000, not 0\z/) do
      db.schedule("s", "* * * * *", queue: "q", max_catch_up: 0)
    end
    refused(/\Amax_catch_up must be between 1 and 100000, not -1\z/) do
      db.schedule("s", "* * * * *", queue: "q", max_catch_up: -1)
    end
    refused(/\Amax_attempts must be an Integer, not Float/) { db.schedule("s", "* * * * *", queue: "q", max_attempts: 1.0) }
    s = db.stream("s2")
    refused(/\Afrom_offset must be >= 0, not -1\z/) { s.subscribe(consumer: "c", from_offset: -1) }
    refused(/\Aautosave_every must be >= 1, not 0 \(leave it out for none\)\z/) { s.subscribe(consumer: "c", autosave_every: 0) }
    db.schedule("s", "* * * * *", queue: "q", max_attempts: 2, max_catch_up: 5)
    refused(/\Amax_attempts must be between 1 and 1000000, not 0\z/) { db.update_schedule("s", max_attempts: 0) }
    got = db.get_schedule("s")
    assert_equal [2, 5], [got.max_attempts, got.max_catch_up]
    db.unschedule("s")
    sub = s.subscribe(consumer: "c", from_offset: 0, autosave_every: 1)
    sub.close
  end

  def test_tasks_and_workers
    refused(/task name must be a String or Symbol, not nil/) { Tocsin.task(nil) { nil } }
    refused(/queue must be a String or Symbol, not nil/) { Tocsin::Task.new("t", -> {}, queue: nil) }
    refused(/retries must be an Integer between 0 and \d+, not true/) { Tocsin::Task.new("t", -> {}, retries: true) }
    refused(/backoff must be a number of seconds, not String/) { Tocsin::Task.new("t", -> {}, backoff: "1") }
    refused(/give a block or a callable/) { Tocsin.task("t") }
    refused(/give a block or a callable/) { Tocsin::Task.new("t", 5) }
    refused(/db must be a Tocsin::Database, not nil/) { Tocsin::Task.new("t", -> {}).call_async(nil) }
    before = Tocsin.periodic.dup
    refused(/cron must be a String, not nil/) { Tocsin.every(nil, "t") }
    refused(/task name must be a String or Symbol, not nil/) { Tocsin.every("* * * * *", nil) }
    refused(/args must be an Array, not Integer/) { Tocsin.every("* * * * *", "t", args: 1) }
    refused(/kwargs must be a Hash, not Array/) { Tocsin.every("* * * * *", "t", kwargs: []) }
    refused(/args\[0\] is a Time/) { Tocsin.every("* * * * *", "t", args: [Time.now]) }
    assert_equal before, Tocsin.periodic
    refute Tocsin.tasks.key?("t")

    refused(/db must be a Tocsin::Database, not nil/) { Tocsin::Worker.new(nil, queues: ["q"]) }
    refused(/queues must be an Array, not String/) { Tocsin::Worker.new(db, queues: "q") }
    refused(/queues\[1\] must be a String or Symbol, not nil/) { Tocsin::Worker.new(db, queues: ["q", nil]) }
    refused(/worker_id must be a String or Symbol, not Integer/) { Tocsin::Worker.new(db, queues: ["q"], worker_id: 5) }
    refused(/scheduler must be true or false, not String/) { Tocsin::Worker.new(db, queues: ["q"], scheduler: "yes") }
    refused(/visibility must be a number of seconds, not nil/) { Tocsin::Worker.new(db, queues: ["q"], visibility: nil) }
    refused(/concurrency must be an Integer between 1 and \d+, not true/) { Tocsin::Worker.new(db, queues: ["q"], concurrency: true) }
    refused(/tasks must be a Hash of name => Tocsin::Task, not Array/) { Tocsin::Worker.new(db, queues: ["q"], tasks: []) }
    refused(/periodic must be an Array, not Hash/) { Tocsin::Worker.new(db, queues: ["q"], periodic: {}) }
    w = Tocsin::Worker.new(db, queues: ["q"], tasks: {}, scheduler: false)
    refused(/trap_signals must be true or false, not String/) { w.run(trap_signals: "yes") }
  end

  # What the sweep above did not try: NUL bytes (refused by the C layer, whose
  # message named no argument), a #to_path that is no String (an Integer from it
  # opened a file named after its digits), a Numeric of the application's (a
  # NoMethodError), Strings that are not UTF-8 in a payload (the json gem's
  # "partial character in source, but hit end", with no place), and a handle
  # made by hand.
  def test_nul_bytes_paths_numerics_and_text_that_is_not_utf8
    q = db.queue("q")
    refused(/queue name contains a NUL byte: "a\\x00b"/) { db.queue("a\0b") }
    refused(/queue name contains a NUL byte/) { db.queue(:"a\0b") }
    refused(/channel contains a NUL byte/) { db.notify("c\0", 1) }
    refused(/path contains a NUL byte/) { Tocsin.open("#{@path}\0x") }
    refused(/sql contains a NUL byte/) { db.execute("SELECT 1;\0 DROP TABLE x") }
    refused(/unique_key contains a NUL byte/) { q.enqueue(1, unique_key: "k\0") }
    refused(/error contains a NUL byte/) { q.retry(@job, error: "e\0") }
    refused(/owner contains a NUL byte/) { db.lock("l", owner: "o\0") }
    refused(/key contains a NUL byte/) { db.stream("s").publish(1, key: "k\0") }
    refused(/cron contains a NUL byte/) { Tocsin.cron_next("* * * * *\0") }
    refused(/queue name contains a NUL byte/) { db.queue("q\0".encode("UTF-16LE")) } # (found once transcoded)

    odd_path = Object.new
    def odd_path.to_path = 5
    refused(/path: Object#to_path must return a String, not Integer/) { Tocsin.open(odd_path) }
    refute File.exist?("5"), "no file was made"

    bare = Class.new(Numeric).new
    refused(/timeout must be a number of seconds: .* cannot be used as one/) { q.wait(timeout: bare) }
    refused(/delay must be a number of seconds: .* cannot be used as one/) { q.enqueue(1, delay: bare) }
    refused(/ttl must be a number of seconds/) { db.lock("l", ttl: Complex(1, 1)) }
    refused(/delay must be a finite number of seconds, not NaN/) { q.enqueue(1, delay: 0.0 / 0) }
    refused(/priority must be a 64-bit Integer, not Object/) do
      q.enqueue(1, priority: Object.new.tap { |o| def o.to_int = 3 })
    end

    refused(/payload\[0\] is the String "a\\xFFb", which is not valid UTF-8/) { q.enqueue(["a\xffb".dup.force_encoding("UTF-8")]) }
    refused(/payload\["k"\]\[1\] is the binary String "\\xFF", which is not valid UTF-8/) { q.enqueue({ "k" => [1, "\xff".b] }) }
    refused(/payload has the String key "\\xFF", which is not valid UTF-8/) { q.enqueue({ "\xff".b.force_encoding("UTF-8") => 1 }) }
    refused(/meta has the binary String key/) { db.stream("s").publish(1, meta: { "\xff".b.to_sym => 1 }) }
    refused(/payload is the String "\\x00\\xD8", which is not valid UTF-16LE/) { db.notify("c", "\x00\xd8".dup.force_encoding("UTF-16LE")) }
    refused(/result is the String/) { db.save_result(@job.id, "\xff".dup.force_encoding("UTF-8")) }
    refused(/args\[0\] is the String/) { q.call("t", "\xff".dup.force_encoding("UTF-8")) }

    refused(/db must be a Tocsin::Database, not nil/) { Tocsin::TaskHandle.new(nil, 1) }
    refused(/job id must be an Integer, not String/) { Tocsin::TaskHandle.new(db, "1") }
  end

  # Every public method of the objects the API hands out, each positional
  # argument and each keyword in turn given a value of the wrong kind: the
  # answer is a Tocsin::Error (an InvalidArgument, or the core's refusal of a
  # well-typed value), never a TypeError or NoMethodError from deeper down.
  def test_no_public_method_answers_a_bad_argument_with_a_ruby_type_error
    q = db.queue("q")
    s = db.stream("s")
    objects = [db, q, s, db.lock("fuzz"), db.rate_limit("r", limit: 1, per: 1), db.queue("q").get(@job.id),
               db.listen("fuzz"), s.subscribe(from_offset: 0, save_on_close: false), db.subscribe,
               Tocsin::TaskHandle.new(db, @job.id)]
    # (left out: blocks, what ends the object, what writes, and the waits whose
    # deadline is on the handle's clock, which setup fixed: tested above)
    left_out = %i[close transaction inspect native handle track own_sub worker_started worker_stopped poke each jobs
              each_job listen subscribe with_lock wait_result acquire cancel retry fail ack hand_back heartbeat
              requeue execute enqueue enqueue_many claim claim_batch ack_batch publish publish_many notify save_result
              save_error set_time save_offset schedule update_schedule unschedule pause resume pause_schedule
              resume_schedule prune set_notify_autotrim call delete_result try reset renew release try_acquire
              stopped_at save max_payload= trim purge value get wait]
    required = { queue: "q", limit: 1, per: 1 }
    bad = [nil, true, false, 1.5, Object.new, [], {}, "x", :sym]
    wrong = []
    objects.each do |o|
      (o.class.public_instance_methods(false) - left_out).each do |m|
        params = o.method(m).parameters
        req = params.count { |t, _| t == :req }
        kws = params.select { |t, _| t == :key || t == :keyreq }.map(&:last)
        must = params.select { |t, _| t == :keyreq }.to_h { |_, k| [k, required.fetch(k)] }
        bad.each do |b|
          calls = req.times.map { |i| [Array.new(req) { |j| j == i ? b : [@job.id, @job.token][j] || "n" }, must] }
          kws.each { |kw| calls << [Array.new(req) { |j| [@job.id, @job.token][j] || "n" }, must.merge(kw => b)] }
          calls.each do |args, kw|
            next if b.nil? && kw.key?(:timeout) # (nil: no bound, valid)

            o.public_send(m, *args, **kw)
          rescue Tocsin::Error
            nil
          rescue StandardError, ScriptError => e
            wrong << "#{o.class}##{m}(#{args.map(&:inspect).join(", ")} #{kw}): #{e.class}: #{e.message[0, 80]}"
          end
        end
      end
    end
    assert_empty wrong.uniq
  end
end
