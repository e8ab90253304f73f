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
end
