# frozen_string_literal: true

require_relative "test_helper"

# Regressions found reviewing the binding as a user and as an attacker.
class TestReview < Minitest::Test
  include TocsinTest

  # Database#close while another thread waits on it (queue, lock, result): the
  # wait ends with Tocsin::Closed; the handle was freed under it before (a hang
  # on a freed mutex, or an assertion abort). In a subprocess: that hang would
  # keep this one from exiting.
  def test_close_while_other_threads_wait_on_the_database
    script = <<~RUBY
      require "tocsin"
      db = Tocsin.open(ARGV[0])
      db.lock("L", owner: "other").try_acquire
      waits = [
        Thread.new { db.queue("q").wait(timeout: 30) },
        Thread.new { db.queue("q").each_job("w", timeout: 30) {} },
        Thread.new { db.lock("L").acquire(timeout: 30) },
        Thread.new { loop { db.queue("busy").stats } },
      ]
      sleep 0.3
      db.close
      waits.each do |t|
        t.join(5) or abort("a wait outlived close")
        t.value
        abort("a wait returned")
      rescue Tocsin::Closed
        nil
      end
      Tocsin.open(ARGV[0]) { |d| d.queue("q").enqueue(1) }
      puts "ok"
    RUBY
    out, err, st = Open3.capture3("timeout", "-s", "KILL", "60", *ruby_cmd("-e", script, @path))
    assert st.success?, "#{out}#{err}"
    assert_equal "ok", out.strip
  end

  # The threads' wake subscriptions (waits) were never closed: one descriptor
  # (and watcher) per thread per database, left open after close.
  def test_close_releases_the_wait_subscriptions
    fds = -> { Dir.children("/proc/self/fd").size }
    skip "no /proc" unless File.directory?("/proc/self/fd")
    Tocsin.open(@path) { |d| d.queue("q").wait(timeout: 0) } # warm up
    before = fds.call
    10.times do
      Tocsin.open(@path) do |d|
        d.queue("q").wait(timeout: 0.01)
        Thread.new { d.queue("q").wait(timeout: 0.01) }.join
      end
    end
    assert_operator fds.call - before, :<=, 1
  end

  # each_job with batch: the jobs not yet yielded when the loop ends early went
  # back with a retry (an attempt spent: a max_attempts: 1 job died unrun) or,
  # on break, stayed leased until the visibility lapsed.
  def test_each_job_hands_back_the_rest_of_a_batch
    q = db.queue("q")
    ids = 3.times.map { |i| q.enqueue(i, max_attempts: 1) }
    assert_raises(RuntimeError) { q.each_job("w", batch: 3, timeout: 0.1) { raise "boom" } }
    assert_equal "dead", q.get(ids[0]).state
    assert_equal %w[pending pending], ids[1..].map { |id| q.get(id).state }

    q2 = db.queue("q2")
    4.times { |i| q2.enqueue(i) }
    seen = []
    q2.each_job("w", batch: 4, timeout: 0.1) do |j|
      seen << j.payload
      break if j.payload == 1
    end
    assert_equal [0, 1], seen
    st = q2.stats
    assert_equal 2, st["pending"]    # 2 and 3, handed back unrun
    assert_equal 1, st["processing"] # 1: the caller's (broke out holding it)
    assert_equal 4, q2.each_job("w", timeout: 0.1).count { true } + 2 # 2, 3, then nothing
  end

  def test_job_hand_back
    q = db.queue("q")
    q.enqueue(1, max_attempts: 1)
    j = q.claim("w")
    assert j.hand_back
    assert j.finished?
    again = q.claim("w")
    assert_equal j.id, again.id
    assert again.ack
  end

  # NaN, infinities and values beyond 64 bits reached Float#round / NUM2LL:
  # FloatDomainError "NaN" or RangeError "bignum too big", naming nothing.
  def test_bad_numbers_are_invalid_argument_naming_the_option
    q = db.queue("q")
    {
      -> { q.enqueue(1, delay: Float::NAN) } => /delay/,
      -> { q.enqueue(1, delay: Float::INFINITY) } => /delay/,
      -> { q.enqueue(1, delay: 10**20) } => /delay/,
      -> { q.enqueue(1, run_at: 2**64) } => /run_at/,
      -> { q.enqueue(1, priority: Float::NAN) } => /priority/,
      -> { q.enqueue(1, priority: 2**70) } => /priority/,
      -> { q.enqueue(1, priority: 1.5) } => /priority/,
      -> { q.claim("w", visibility: Float::NAN) } => /visibility/,
      -> { db.wait_result(1, timeout: Float::NAN) } => /timeout/,
      -> { db.lock("l", ttl: Float::INFINITY) } => /ttl/,
      -> { db.prune(notifications_max_age: Float::NAN) } => /notifications_max_age/,
      -> { db.stream("s").trim(max_age: -Float::INFINITY) } => /max_age/,
      -> { q.enqueue(1, delay: Complex(1, 1)) } => /delay/,
      -> { Tocsin.open(@path, busy_timeout: Float::NAN) } => /busy_timeout/,
    }.each do |call, what|
      e = assert_raises(Tocsin::InvalidArgument) { call.call }
      assert_match what, e.message
    end
    assert_equal 0, q.stats["pending"] + q.stats["scheduled"]
  end

  # meta that JSON cannot hold raised JSON::GeneratorError.
  def test_unserialisable_meta_is_invalid_argument
    e = assert_raises(Tocsin::InvalidArgument) { db.queue("q").enqueue(1, meta: { "x" => Float::NAN }) }
    assert_match(/meta/, e.message)
    assert_raises(Tocsin::InvalidArgument) { db.stream("s").publish(1, meta: { "x" => Float::NAN }) }
  end

  # Tocsin.cron_next lost the parser's message ("invalid argument").
  def test_cron_next_says_what_is_wrong
    e = assert_raises(Tocsin::InvalidArgument) { Tocsin.cron_next("x") }
    assert_match(/fields/, e.message)
  end

  # NUL bytes raised ArgumentError (not a Tocsin::Error); a UTF-16 string was
  # cut at its first NUL byte ("abc" became queue "a"); a name in another
  # encoding (ISO-8859-1) was refused as "not valid UTF-8".
  def test_strings_nul_bytes_and_encodings
    e = assert_raises(Tocsin::InvalidArgument) { db.queue("a\0b").enqueue(1) }
    assert_match(/NUL/, e.message)
    assert_raises(Tocsin::InvalidArgument) { db.notify("c\0", 1) }
    assert_raises(Tocsin::InvalidArgument) { db.save_error(1, "T\0", "m") }
    assert_raises(Tocsin::InvalidArgument) { db.execute("SELECT 1;\0DROP TABLE x") }

    db.queue("abc".encode("UTF-16LE")).enqueue(1)
    assert_equal 1, db.queue("abc").stats["pending"]
    latin = "caf\xE9".dup.force_encoding("ISO-8859-1")
    db.queue(latin).enqueue(2, unique_key: latin)
    assert_equal 1, db.queue("café").stats["pending"]
    j = db.queue("café").claim(latin)
    assert_equal "café", j.unique_key
    assert_equal "café", j.worker.split.first
    assert_raises(Tocsin::InvalidArgument) { db.queue("\xFF".b).enqueue(1) }
  end

  # Integer arguments went through NUM2LL / NUM2INT: a String raised a bare
  # TypeError ("no implicit conversion of String into Integer", naming no
  # argument), a Float was cut (ack(1.9, token) acked job 1) and a value beyond
  # the C type raised RangeError "bignum too big". Now each is
  # Tocsin::InvalidArgument naming the argument, raised before anything is written.
  def assert_refused(what, &call)
    e = assert_raises(Tocsin::InvalidArgument, "#{what}: #{call.source_location.inspect}", &call)
    assert_match what, e.message
    assert_equal Tocsin::InvalidArgument::CODE, e.code
    e
  end

  def test_integer_arguments_name_what_is_wrong_and_write_nothing
    db.set_time(1_700_000_000_000) # stats' oldest_pending_age_ms stays put
    q = db.queue("q")
    q.enqueue("a")
    job = q.claim("w")
    q.enqueue("b")
    s = db.stream("s")
    s.publish(1)
    s.save_offset("c", 1)
    before = [q.stats, s.offset("c"), s.read.size, db.stats]

    e = assert_refused(/job id/) { q.ack("1", job.token) }
    assert_equal "job id must be an Integer, not String", e.message
    assert_refused(/job id/) { q.ack(job.id + 0.9, job.token) }         # was cut to job.id: acked
    assert_refused(/job id must be an Integer, not Float/) { q.ack(job.id.to_f, job.token) }
    assert_refused(/token/) { q.ack(job.id, job.token.to_f) }
    assert_refused(/token/) { q.ack(job.id, "#{job.token}") }
    e = assert_refused(/job id/) { q.ack(2**64, job.token) }
    assert_match(/64-bit Integer, not 18446744073709551616/, e.message)
    assert_refused(/job id/) { q.ack(-2**63 - 1, job.token) }
    assert_refused(/job id/) { q.retry(job.id.to_s, job.token) }
    assert_refused(/job id/) { q.fail(2**63, job.token) }
    assert_refused(/job id/) { q.hand_back(job.id + 0.5, job.token) }
    assert_refused(/job id/) { q.heartbeat(nil, job.token) }
    assert_refused(/job id/) { q.cancel(job.id.to_f) }                   # was cut: cancelled
    assert_refused(/job id/) { q.cancel(2**100) }
    assert_refused(/job id/) { q.get("1") }
    assert_refused(/job id/) { q.requeue(1.0) }
    assert_refused(/job id/) { db.save_result(job.id + 0.1, "v") }       # was cut: saved for job.id
    assert_refused(/job id/) { db.save_error("7", "T", "m") }
    assert_refused(/job id/) { db.result(2**64) }
    assert_refused(/job id/) { db.wait_result("1", timeout: 0) }
    assert_refused(/job id of ack_batch entry 1/) { q.ack_batch([[job.id, job.token], ["2", 1]]) }
    assert_refused(/ack_batch entry 0 must be a Job or an \[id, token\] pair/) { q.ack_batch([job.id]) }

    # counts: negative, zero, past the core's limit, beyond 64 bits, not Integers
    assert_refused(/claim count must be between 1 and 10000, not -1/) { q.claim_batch(-1, "w") }
    assert_refused(/claim count must be between 1 and 10000, not 10001/) { q.claim_batch(10_001, "w") }
    assert_refused(/claim count must be between 1 and 10000, not 18446744073709551616/) { q.claim_batch(2**64, "w") }
    assert_refused(/claim count must be an Integer, not Float/) { q.claim_batch(1.5, "w") }
    assert_refused(/claim count/) { q.each_job("w", batch: "10", timeout: 0) { flunk } }
    assert_refused(/limit must be between 1 and 10000, not -1/) { q.dead_letters(limit: -1) }
    assert_refused(/limit must be between 1 and 10000/) { s.read(limit: 10**30) }
    assert_refused(/limit must be an Integer, not String/) { db.notifications("ch", limit: "5") }
    assert_refused(/after must be a 64-bit Integer/) { s.read(after: 2**64) }
    assert_refused(/after must be an Integer, not Float/) { db.notifications("ch", after: 0.5) }
    assert_refused(/buffer_size must be between 1 and 10000/) { db.listen("ch", buffer_size: 0) }
    assert_refused(/batch must be between 1 and 10000/) { s.subscribe(batch: 10**6) }
    assert_refused(/max_count must be >= 1, not -1/) { s.trim(max_count: -1) }
    assert_refused(/max_count/) { s.trim(max_count: 2.5) }
    assert_refused(/notifications_keep must be >= 1, not -2/) { db.prune(notifications_keep: -2) }
    assert_refused(/max_keep/) { db.set_notify_autotrim(max_keep: "10") }
    assert_refused(/one_in/) { db.set_notify_autotrim(max_keep: 10, one_in: 2**64) }
    assert_refused(/limit must be an Integer, not String/) { db.rate_limit("r", limit: "5", per: 1).try }

    # offsets
    assert_refused(/offset must be >= 0, not -1/) { s.save_offset("c", -1) }
    assert_refused(/offset must be between 0 and 9223372036854775807, not 9223372036854775808/) do
      s.save_offset("c", 2**63)
    end
    assert_refused(/offset must be an Integer, not Float/) { s.save_offset("c", 0.7) } # was cut: saved 0
    assert_refused(/from_offset/) { s.subscribe(from_offset: "0") }

    # the ints of enqueue and schedules, and attempts
    assert_refused(/max_attempts must be between 1 and 1000000, not 1099511627776/) { q.enqueue(1, max_attempts: 2**40) }
    assert_refused(/max_attempts/) { q.enqueue_many([1, { payload: 2, max_attempts: 2**64 }]) }
    assert_refused(/max_attempts must be between 1 and 1000000, not 1099511627776/) { db.schedule("sc", "* * * * *", queue: "q", max_attempts: 2**40) }
    assert_refused(/max_catch_up must be an Integer, not Float/) do
      db.schedule("sc", "* * * * *", queue: "q", catch_up: :all, max_catch_up: 5.0)
    end
    assert_refused(/priority must be an Integer, not String/) { db.schedule("sc", "* * * * *", queue: "q", priority: "1") }
    assert_refused(/retries must be an Integer between 0 and 999999/) { Tocsin::Task.new("t", -> {}, retries: 1.5) }
    assert_refused(/concurrency must be an Integer between 1 and 10000, not 1099511627776/) do
      Tocsin::Worker.new(db, queues: ["q"], concurrency: 2**40)
    end
    assert_refused(/attempts must be between 0 and 2147483647/) { Tocsin.backoff_ms(2**40) }
    assert_refused(/max_payload must be an Integer, not Float/) { db.max_payload = 1e3 }

    assert_equal before, [q.stats, s.offset("c"), s.read.size, db.stats]
    assert_equal "processing", q.get(job.id).state
    assert_nil db.result(job.id)
    assert_empty db.schedules
  end

  # busy_timeout (a C int of milliseconds) over 2**31-1 ms (~24.8 days) raised
  # RangeError from NUM2INT; it is refused in the caller's unit, before the file
  # is opened (or created).
  def test_busy_timeout_beyond_an_int_of_ms
    other = File.join(@dir, "other.db")
    e = assert_refused(/busy_timeout/) { Tocsin.open(other, busy_timeout: 30 * 86_400) }
    assert_equal "busy_timeout must be between 0 and 2147483.647 seconds, not 2592000 seconds", e.message
    assert_refused(/busy_timeout must be > 0 seconds, not -0.5/) do
      Tocsin.open(other, busy_timeout: -0.5)
    end
    assert_refused(/busy_timeout/) { Tocsin.open(other, busy_timeout: "5") }
    refute File.exist?(other)
    Tocsin.open(other, busy_timeout: 2_147_483.647) { |d| assert_equal 0, d.queue("q").stats["pending"] }
  end

  # A negative duration reached the core, which reads some negative values as
  # "none" or "the backoff": retry(delay: -5) retried with the backoff,
  # save_result(ttl: -1) kept the result forever, wait(timeout: -1) waited
  # without bound. Each is refused, naming the argument, and writes nothing.
  def test_negative_durations_are_refused
    q = db.queue("q")
    q.enqueue("a", max_attempts: 3)
    job = q.claim("w")
    assert_refused(/delay must be >= 0 seconds, not -5/) { q.retry(job, delay: -5) }
    assert_refused(/delay must be >= 0 seconds/) { job.hand_back(delay: -1) }
    assert_refused(/extend must be > 0 seconds/) { q.heartbeat(job, extend: -1) }
    assert_refused(/ttl must be > 0 seconds/) { db.save_result(job.id, "v", ttl: -1) }
    assert_refused(/delay must be >= 0 seconds/) { q.enqueue("b", delay: -0.001) }
    assert_refused(/timeout must be >= 0 seconds/) { q.wait(timeout: -1) }
    assert_refused(/shutdown_timeout must be a number of seconds, not String/) do
      Tocsin::Worker.new(db, queues: ["q"], shutdown_timeout: "5")
    end
    assert_refused(/shutdown_timeout must be >= 0 seconds/) { Tocsin::Worker.new(db, queues: ["q"], shutdown_timeout: -1) }
    assert_refused(/publish_many: 1 keys for 2 payloads/) { db.stream("s").publish_many([1, 2], keys: ["a"]) }
    assert_empty db.stream("s").read
    assert_equal "processing", q.get(job.id).state
    assert_nil db.result(job.id)
    assert_equal 0, q.stats["pending"] + q.stats["scheduled"]
  end
end
