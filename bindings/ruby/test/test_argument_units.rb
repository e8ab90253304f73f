# frozen_string_literal: true

require_relative "test_helper"
require "tocsin/sql"

# A duration or instant out of the core's range is refused naming the Ruby
# keyword, in the caller's unit (seconds; epoch milliseconds for an Integer
# instant) -- never the core's message, which names its C argument (delay_ms)
# in ms -- and nothing is written. So are the "needs one of" / "not both" cases.
class TestArgumentUnits < Minitest::Test
  include RefusalFixture

  BIG = 10**12 # seconds: 1000 times the core's bound
  MAX_S = "253402300799.999"

  def refused(what, &call)
    e = assert_raises(Tocsin::InvalidArgument, "#{what.inspect} at #{call.source_location.inspect}", &call)
    assert_match what, e.message, "at #{call.source_location.inspect}"
    refute_match(/_ms\b/, e.message)
    e
  end

  def fixture
    db.stream("s").publish(1)
    db.notify("c", "x")
  end

  def test_the_bound_is_the_cores
    assert_equal 253_402_300_799_999, Tocsin::Util::MAX_MS
    assert_equal MAX_S, Tocsin::Util.seconds_text(Tocsin::Native::MAX_TIME_MS)
  end

  # A 0 the core would read as "none" or "the default" is refused where Python and Node
  # refuse it, and a fraction of a millisecond is 1 ms, never 0 (a job that never expires,
  # a 5 s lock wait for busy_timeout: 0.0001).
  def test_zero_and_sub_millisecond_durations
    q = db.queue("q")
    refused(/\Aexpires must be > 0 seconds, not 0 \(leave it out for none\)\z/) { q.enqueue(1, expires: 0) }
    refused(/\Abusy_timeout must be > 0 seconds, not 0/) { Tocsin.open(db.path, busy_timeout: 0) }
    refused(/\Aresult_ttl must be > 0 seconds, not 0/) { q.call("t", result_ttl: 0) }
    refused(/\Atimeout must be > 0 seconds, not 0/) { q.call("t", timeout: 0) }
    refused(/\Attl must be > 0 seconds, not 0/) { db.save_result(1, 1, ttl: 0) }
    refused(/\Aexpires must be > 0 seconds/) { Tocsin::SQL.enqueue(nil, "q", 1, expires: 0.0) }
    id = q.enqueue(1, expires: 0.0004)
    job = q.get(id)
    assert_equal 1, job.expires_at - job.created_at
    assert_equal 1, Tocsin::Util.ms(0.0004, "visibility", min_ms: 1)
    assert_equal 0, Tocsin::Util.ms(0.0004, "delay")
    @before = snapshot
  end

  # An instant the core reads as "none" when 0 is refused, as Python and Node refuse it:
  # purge(before: 0) and prune(dead_before: 0) deleted every dead letter, and run_at: 0
  # (or Time.at(0)) ran the job now. The epoch stays an instant where 0 means it.
  def test_an_instant_of_0_is_not_none
    q = db.queue("q")
    q.enqueue("d", max_attempts: 1)
    q.claim("w2").fail(error: "x")
    @before = snapshot
    assert_equal 1, q.dead_letters.size
    refused(/\Abefore must be epoch milliseconds from 1 to 253402300799999 .*, not 0 \(leave it out for none\)\z/) do
      q.purge(before: 0)
    end
    refused(/\Abefore must be after 1970-01-01 00:00:00 UTC, not .* \(leave it out for none\)\z/) { q.purge(before: Time.at(0)) }
    refused(/\Abefore must be after 1970-01-01/) { q.purge(before: Time.at(0, 400, :usec)) }
    refused(/\Adead_before must be epoch milliseconds from 1 to/) { db.prune(dead_before: 0) }
    refused(/\Adead_before must be after 1970-01-01/) { db.prune(dead_before: Time.at(0)) }
    refused(/\Arun_at must be epoch milliseconds from 1 to/) { q.enqueue(1, run_at: 0) }
    refused(/\Arun_at must be after 1970-01-01/) { q.enqueue(1, run_at: Time.at(0)) }
    refused(/\Ajobs\[0\] run_at must be epoch milliseconds from 1 to/) { q.enqueue_many([{ payload: 1, run_at: 0 }]) }
    refused(/\Arun_at must be epoch milliseconds from 1 to/) { q.call("t", run_at: 0) }
    refused(/\Arun_at must be epoch milliseconds from 1 to/) { Tocsin::SQL.enqueue(nil, "q", 1, run_at: 0) }
    assert_equal 1, q.dead_letters.size
    # 1 ms after the epoch is an instant: nothing died before it
    assert_equal 0, q.purge(before: 1)
    assert_equal 0, db.prune(dead_before: 1)[:dead]
    # where 0 is the epoch, it still is
    assert_kind_of Integer, Tocsin.cron_next("* * * * *", after: 0)
  end

  # Checked where they are given, named as given: a worker's queue names at
  # construction (not at run), a payload limit of 0 (the core's "default"), a
  # negative duration where 0 is refused too.
  def test_refused_where_given_named_as_given
    refused(/\Aqueues\[0\] must not be empty\z/) { Tocsin::Worker.new(db, queues: [""]) }
    refused(/\Aqueues\[1\] must not contain control characters\z/) { Tocsin::Worker.new(db, queues: ["a", "b\tc"]) }
    refused(/\Amax_payload must be >= 1 \(bytes\), not 0\z/) { Tocsin.open(db.path, max_payload: 0) }
    refused(/\Amax_payload must be >= 1 \(bytes\), not -1\z/) { db.max_payload = -1 }
    refused(/\Avisibility must be > 0 seconds, not -1\z/) { db.queue("q").claim("w", visibility: -1) }
    refused(/\Attl must be > 0 seconds, not -1\z/) { db.lock("l", ttl: -1) }
    refused(/\Adelay must be >= 0 seconds, not -1\z/) { db.queue("q").enqueue(1, delay: -1) }
  end

  def test_enqueue_names_the_keyword_in_seconds
    q = db.queue("q")
    e = refused(/\Adelay must be between 0 and #{MAX_S} seconds, not 1000000000000 seconds\z/) { q.enqueue(1, delay: BIG) }
    assert_equal Tocsin::InvalidArgument::CODE, e.code
    refused(/\Adelay must be between 0 and #{MAX_S} seconds, not 1.0e\+300 seconds\z/) { q.enqueue(1, delay: 1e300) }
    refused(/\Adelay must be between 0 and #{MAX_S} seconds, not 1.000e\+400 seconds\z/) { q.enqueue(1, delay: 10**400) }
    refused(/\Adelay must be a finite number of seconds, not Infinity\z/) { q.enqueue(1, delay: Float::INFINITY) }
    refused(/\Adelay must be >= 0 seconds, not -1\z/) { q.enqueue(1, delay: -1) }
    refused(/\Aexpires must be between 0 and #{MAX_S} seconds/) { q.enqueue(1, expires: BIG) }
    refused(/\Arun_at must be epoch milliseconds from 1 to 253402300799999 \(9999-12-31 23:59:59.999 UTC\), not -1\z/) do
      q.enqueue(1, run_at: -1)
    end
    refused(/\Arun_at must be epoch milliseconds from 1 to 253402300799999/) { q.enqueue(1, run_at: 10**15) }
    refused(/\Arun_at must be at most 9999-12-31 23:59:59.999 UTC, not /) { q.enqueue(1, run_at: Time.at(BIG)) }
    refused(/\Arun_at must not be before 1970-01-01/) { q.enqueue(1, run_at: Time.at(-1)) }
    refused(/\Agive delay or run_at, not both\z/) { q.enqueue(1, delay: 1, run_at: Time.now) }
    refused(/\Ajobs\[1\]: give delay or run_at, not both\z/) do
      q.enqueue_many([2, { payload: 3, delay: 1, run_at: Time.now }])
    end
    refused(/\Ajobs\[0\] delay must be between 0 and/) { q.enqueue_many([{ payload: 3, delay: BIG }]) }
    refused(/\Adelay must be between 0 and/) { q.call("t", delay: BIG) }
    refused(/\Aresult_ttl must be between 0 and/) { q.call("t", result_ttl: BIG) }
    refused(/\Agive delay or run_at, not both\z/) { Tocsin::SQL.enqueue(nil, "q", 1, delay: 1, run_at: 5) }
    # the bounds themselves are accepted
    q.enqueue(1, delay: Rational(Tocsin::Util::MAX_MS, 1000))
    q.enqueue(1, run_at: Tocsin::Util::MAX_MS)
    assert_equal 2, db.stats.find { |s| s["queue"] == "q" }["scheduled"]
    @before = snapshot
  end

  def test_job_calls_name_the_keyword_in_seconds
    q = db.queue("q")
    refused(/\Avisibility must be between 0.001 and #{MAX_S} seconds, not 0 seconds\z/) { q.claim("w", visibility: 0) }
    refused(/\Avisibility must be between 0.001 and/) { q.claim_batch(2, "w", visibility: BIG) }
    refused(/\Adelay must be between 0 and/) { q.retry(@job, delay: BIG) }
    refused(/\Adelay must be between 0 and/) { q.hand_back(@job, delay: BIG) }
    refused(/\Aextend must be between 0.001 and/) { q.heartbeat(@job, extend: 0) }
    refused(/\Atimeout must be between 0 and/) { q.wait(timeout: BIG) }
    refused(/\Abefore must be epoch milliseconds from 1 to/) { q.purge(before: 10**15) }
    refused(/\Attl must be between 0 and/) { db.save_result(@job.id, 1, ttl: BIG) }
    refused(/\Atimeout must be between 0 and/) { db.listen("c", timeout: BIG) }
  end

  def test_trim_and_autotrim_name_their_keywords
    refused(/\Atrim needs max_age:, max_count: or below_consumers: true\z/) { db.stream("s").trim }
    refused(/\Amax_age must be > 0 seconds, not 0 \(leave it out for none\)\z/) { db.stream("s").trim(max_age: 0, max_count: 0) }
    refused(/\Amax_age must be between 0 and/) { db.stream("s").trim(max_age: BIG) }
    refused(/\Aset_notify_autotrim needs max_age: or max_keep: \(one_in: 0 turns it off\)\z/) { db.set_notify_autotrim }
    refused(/\Amax_age must be between 0 and/) { db.set_notify_autotrim(max_age: BIG) }
    refused(/\Anotifications_max_age must be between 0 and/) { db.prune(notifications_max_age: BIG) }
    refused(/\Adead_before must be epoch milliseconds/) { db.prune(dead_before: -5) }
    db.set_notify_autotrim(one_in: 0) # off needs neither
  end

  # The core reads a 0 of a trim or prune criterion as "no such criterion": an explicit
  # 0 ("keep none", "older than 0 s") pruned nothing, silently. It is refused, and
  # nothing is deleted (the fixture's event and notification stay).
  def test_a_zero_trim_or_prune_criterion_is_refused
    s = db.stream("s")
    refused(/\Anotifications_keep must be >= 1, not 0 \(leave it out for no limit\)\z/) { db.prune(notifications_keep: 0) }
    refused(/\Anotifications_max_age must be > 0 seconds, not 0/) { db.prune(notifications_max_age: 0) }
    refused(/\Anotifications_keep must be >= 1, not 0/) { db.prune(notifications_max_age: 60, notifications_keep: 0) }
    refused(/\Amax_count must be >= 1, not 0 \(leave it out for no limit\)\z/) { s.trim(max_age: 60, max_count: 0) }
    refused(/\Amax_age must be > 0 seconds, not 0/) { s.trim(max_age: 0, max_count: 5) }
    refused(/\Amax_keep must be >= 1, not 0/) { db.set_notify_autotrim(max_age: 60, max_keep: 0) }
    refused(/\Amax_age must be > 0 seconds, not 0/) { db.set_notify_autotrim(max_age: 0, max_keep: 5) }
  end

  def test_leases_and_windows_are_bounded_in_seconds
    refused(/\Attl must be between 0.001 and 31622400 seconds \(366 days\), not 34560000 seconds\z/) do
      db.lock("l", ttl: 400 * 86_400)
    end
    refused(/\Attl must be between 0.001 and 31622400/) { db.lock("l", ttl: 0) }
    refused(/\Attl must be between 0.001 and 31622400/) { db.lock("l2", ttl: 1).renew(ttl: BIG) }
    refused(/\Aper must be between 0.001 and 31622400 seconds/) { db.rate_limit("r", limit: 1, per: 400 * 86_400) }
    refused(/\Ascheduler_ttl must be between 0.003 and 31622400/) { Tocsin::Worker.new(db, queues: ["q"], scheduler_ttl: BIG) }
    refused(/\Avisibility must be between 0.003 and #{MAX_S} seconds, not 0.002 seconds\z/) do
      Tocsin::Worker.new(db, queues: ["q"], visibility: 0.002)
    end
    refused(/\Ashutdown_timeout must be between 0 and/) { Tocsin::Worker.new(db, queues: ["q"], shutdown_timeout: BIG) }
  end

  def test_other_durations_and_instants
    refused(/\Abackoff must be between 0 and/) { Tocsin.task("t1", -> {}, backoff: BIG) }
    refused(/\Atimeout must be between 0 and/) { Tocsin.task("t2", -> {}, timeout: BIG) }
    refused(/\Ajob_expires must be between 0 and/) { db.schedule("s", "* * * * *", queue: "q", job_expires: BIG) }
    # (the core's cron_next left no message: this raised an earlier call's)
    refused(/\Aafter must be epoch milliseconds from 0 to/) { Tocsin.cron_next("* * * * *", after: 10**15) }
    refused(/\Abusy_timeout must be between 0 and 2147483.647 seconds, not 1000000000000 seconds\z/) do
      Tocsin.open(File.join(@dir, "other.db"), busy_timeout: BIG)
    end
    refute File.exist?(File.join(@dir, "other.db"))
  end
end
