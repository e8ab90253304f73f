# frozen_string_literal: true

require_relative "test_helper"
require "active_job"
require "tocsin/active_job_adapter"

class TocsinTestJob < ActiveJob::Base
  queue_as :mailers
  RAN = ::Queue.new
  def perform(who, greeting: "hello")
    RAN << "#{greeting} #{who}"
  end
end

class TocsinTypedArgsJob < ActiveJob::Base
  RAN = ::Queue.new
  def perform(at, sym, opts) = RAN << [at, sym, opts]
end

class TocsinFailingJob < ActiveJob::Base
  def perform = raise(ArgumentError, "no such user")
end

class TocsinIdJob < ActiveJob::Base
  queue_as :mailers
  SEEN = ::Queue.new
  def perform = SEEN << provider_job_id
end

# A job that rescues every StandardError (retry_on / discard_on StandardError,
# common in Rails apps) and runs until it is stopped.
class TocsinRetryAllJob < ActiveJob::Base
  STARTED = ::Queue.new
  retry_on StandardError, wait: 3600, attempts: 5
  def perform = (STARTED << provider_job_id; sleep 30)
end

class TocsinDiscardAllJob < ActiveJob::Base
  STARTED = ::Queue.new
  discard_on StandardError
  def perform = (STARTED << provider_job_id; sleep 30)
end

class TocsinNotAJob
  MADE = ::Queue.new
  def initialize = MADE << true
end

# ActiveJob::QueueAdapters::TocsinAdapter, with Debian's activejob.
class TestActiveJob < Minitest::Test
  include TocsinTest

  def setup
    super
    ActiveJob::Base.logger = Logger.new(nil)
    Tocsin::ActiveJobSupport.database = db
    ActiveJob::Base.queue_adapter = :tocsin
  end

  def teardown
    Tocsin::ActiveJobSupport.database = nil
    super
  end

  def test_adapter_is_found_by_name_and_jobs_run_on_a_tocsin_worker
    assert_kind_of ActiveJob::QueueAdapters::TocsinAdapter, ActiveJob::Base.queue_adapter
    job = TocsinTestJob.perform_later("ann", greeting: "hi")
    refute_nil job.provider_job_id
    stored = db.queue("mailers").get(job.provider_job_id)
    assert_equal "active_job", stored.payload["task"]
    assert_equal "TocsinTestJob", stored.payload["args"][0]["job_class"]
    later = TocsinTestJob.set(wait: 3600).perform_later("bob")
    assert_equal "scheduled", db.queue("mailers").get(later.provider_job_id).state
    failing = TocsinFailingJob.perform_later

    w = Tocsin::Worker.new(db, queues: %w[mailers default], scheduler: false)
    th = Thread.new { w.run }
    assert_equal "hi ann", TocsinTestJob::RAN.pop
    err = assert_raises(Tocsin::TaskError) { db.wait_result(failing.provider_job_id, timeout: 10).then { |r| raise Tocsin::TaskError.new(r.error_type, r.error_message, r.job_id) if r.error? } }
    assert_equal "ArgumentError", err.type
    w.stop
    th.join(10)
    assert_equal 1, db.queue("mailers").stats["scheduled"]
    # the exception ended the job at once: no tocsin retry (retries are ActiveJob's)
    dead = db.queue("default").get(failing.provider_job_id)
    assert_equal ["dead", "failed", 1, Tocsin::ActiveJobSupport::RUNS], [dead.state, dead.reason, dead.attempts, dead.max_attempts]
    assert_match(/ArgumentError: no such user/, dead.last_error)
  end

  # A worker killed mid-job (kill -9) loses nothing: the job runs again on
  # another worker (the dead one's lease given up), where before it was dead
  # "lease expired" (one tocsin attempt per job: at most once).
  def test_a_job_whose_worker_was_killed_runs_again
    marker = File.join(@dir, "crashed")
    File.write(File.join(@dir, "jobs.rb"), <<~RUBY)
      require "active_job"
      require "tocsin/active_job_adapter"
      ActiveJob::Base.logger = Logger.new(nil)
      class TocsinCrashOnceJob < ActiveJob::Base
        def perform(marker)
          return if File.exist?(marker)
          File.write(marker, "x")
          Process.kill(:KILL, Process.pid)
        end
      end
    RUBY
    require File.join(@dir, "jobs.rb")
    job = TocsinCrashOnceJob.perform_later(marker)
    pid = Process.spawn(*worker_cmd("--db", @path, "--require", File.join(@dir, "jobs.rb"), "--queue", "default"),
                        out: File::NULL, err: File::NULL)
    _, st = Process.wait2(pid)
    assert_equal "KILL", Signal.signame(st.termsig), "the worker died in the job"
    assert File.exist?(marker)
    q = db.queue("default")
    assert_equal "processing", q.get(job.provider_job_id).state
    run_worker(queues: %w[default]) do
      r = db.wait_result(job.provider_job_id, timeout: 30)
      refute r.error?, r.inspect
    end
    assert_nil q.get(job.provider_job_id), "completed"
  end

  # A store that cannot take the job (here: closed) is ActiveJob::EnqueueError where
  # ActiveJob has it (7.0+: perform_later then returns false); without it (6.1, the
  # version installed here) the tocsin error itself. A job that cannot be enqueued
  # raises its own error either way.
  def test_unavailable_store_is_an_enqueue_error
    closed = Tocsin.open(@path)
    closed.close
    adapter = ActiveJob::QueueAdapters::TocsinAdapter.new(closed)
    e = assert_raises(Tocsin::Closed) { adapter.enqueue(TocsinTestJob.new("a")) }
    assert_match(/TocsinTestJob: /, e.message)
    defined = !ActiveJob.const_defined?(:EnqueueError, false)
    ActiveJob.const_set(:EnqueueError, Class.new(StandardError)) if defined
    begin
      e = assert_raises(ActiveJob::EnqueueError) { adapter.enqueue(TocsinTestJob.new("a")) }
      assert_match(/\ATocsinTestJob: .*closed/, e.message)
      assert_kind_of Tocsin::Closed, e.cause
      e = assert_raises(ActiveJob::EnqueueError) { adapter.enqueue_at(TocsinTestJob.new("a"), Time.now.to_f + 60) }
      assert_kind_of Tocsin::Closed, e.cause
      # perform_all_later's enqueue_all: none enqueued, nothing raised, each job told
      jobs = [TocsinTestJob.new("a"), TocsinTestJob.new("b")]
      assert_equal 0, adapter.enqueue_all(jobs)
      assert(jobs.all? { |j| j.provider_job_id.nil? })
      if jobs.first.respond_to?(:enqueue_error)
        assert(jobs.all? { |j| j.enqueue_error.is_a?(ActiveJob::EnqueueError) && !j.successfully_enqueued? })
      end
      # a job that cannot be enqueued is not the store's fault: its error stands
      live = ActiveJob::QueueAdapters::TocsinAdapter.new(db)
      assert_raises(Tocsin::InvalidArgument) { live.enqueue(TocsinTestJob.new(Float::INFINITY)) }
      assert_raises(Tocsin::InvalidArgument) { live.enqueue_all([TocsinTestJob.new(Float::NAN)]) }
      assert_equal 0, db.queue("mailers").stats["pending"]
    ensure
      ActiveJob.send(:remove_const, :EnqueueError) if defined
    end
  end

  # perform_all_later (ActiveJob 7.1+) calls enqueue_all: one transaction, all or none.
  def test_enqueue_all_is_one_transaction_all_or_none
    adapter = ActiveJob::QueueAdapters::TocsinAdapter.new(db)
    later = TocsinTestJob.new("b")
    later.scheduled_at = Time.now.to_f + 3600
    jobs = [TocsinTestJob.new("a"), later]
    assert_equal 2, adapter.enqueue_all(jobs)
    q = db.queue("mailers")
    assert_equal %w[pending scheduled], jobs.map { |j| q.get(j.provider_job_id).state }
    assert(jobs.all? { |j| !j.respond_to?(:successfully_enqueued?) || j.successfully_enqueued? })
    bad = [TocsinTestJob.new("c"), TocsinTestJob.new(Float::INFINITY)]
    e = assert_raises(Tocsin::InvalidArgument) { adapter.enqueue_all(bad) }
    assert_match(/TocsinTestJob: /, e.message)
    assert_equal [nil, nil], bad.map(&:provider_job_id)
    assert_equal [1, 1], [q.stats["pending"], q.stats["scheduled"]], "none of the refused batch was written"
  end

  # ActiveJob: a lower priority number runs first (tocsin stores it negated).
  def test_lower_activejob_priority_is_claimed_first
    low = TocsinTestJob.set(priority: 50).perform_later("late")
    high = TocsinTestJob.set(priority: 10).perform_later("early")
    plain = TocsinTestJob.perform_later("plain")
    q = db.queue("mailers")
    assert_equal(-10, q.get(high.provider_job_id).priority)
    assert_equal(-50, q.get(low.provider_job_id).priority)
    assert_equal 0, q.get(plain.provider_job_id).priority
    order = 3.times.map { q.claim("w").tap(&:ack).id }
    assert_equal [plain.provider_job_id, high.provider_job_id, low.provider_job_id], order
  end

  # ActiveJob serialises its own arguments (a Time, a Symbol, a Symbol-keyed
  # Hash become JSON values it reads back) before the adapter enqueues them:
  # they pass tocsin's JSON-value check and arrive as they were given.
  def test_activejob_serialised_arguments_pass_the_json_check
    at = Time.utc(2030, 1, 2, 3, 4, 5)
    job = TocsinTypedArgsJob.perform_later(at, :urgent, { retry: true, n: 2 })
    stored = db.queue("default").get(job.provider_job_id)
    assert_kind_of Hash, stored.payload["args"][0]
    w = Tocsin::Worker.new(db, queues: %w[default], scheduler: false)
    th = Thread.new { w.run }
    got = TocsinTypedArgsJob::RAN.pop
    w.stop
    th.join(10)
    assert_equal [at, :urgent, { retry: true, n: 2 }], got
  end

  # (ActiveJob's set(priority:) makes an Integer; a job class may still answer another)
  def test_a_priority_that_is_no_integer_is_invalid_argument
    job = TocsinTestJob.new("x")
    job.define_singleton_method(:priority) { "high" }
    adapter = ActiveJob::QueueAdapters::TocsinAdapter.new(db)
    e = assert_raises(Tocsin::InvalidArgument) { adapter.enqueue(job) }
    assert_match(/TocsinTestJob: priority must be an Integer, not String/, e.message)
    e = assert_raises(Tocsin::InvalidArgument) { adapter.enqueue_at(TocsinTestJob.new("y"), Float::NAN) }
    assert_match(/the scheduled time must be epoch seconds/, e.message)
    assert_equal 0, db.queue("mailers").stats["pending"]
  end

  def run_worker(**opts)
    w = Tocsin::Worker.new(db, scheduler: false, **opts)
    th = Thread.new { w.run }
    yield w
  ensure
    w&.stop
    th&.join(10)
  end

  # perform sees its tocsin job id as provider_job_id (Rails' own adapters set it,
  # Sidekiq's jid): it was nil on the worker. A worker on a job's queue no longer
  # warns that no task is registered for it (the ActiveJob task runs every queue).
  def test_provider_job_id_in_perform_and_no_unknown_queue_warning
    job = TocsinIdJob.perform_later
    _, err = capture_io do
      run_worker(queues: %w[mailers]) { assert_equal job.provider_job_id, TocsinIdJob::SEEN.pop }
    end
    refute_match(/no task is registered/, err)
  end

  # A worker's shutdown past shutdown_timeout hands the job back (pending, no
  # attempt spent), also for a job class whose retry_on / discard_on takes every
  # StandardError: the JobCancelled raised into it was a StandardError, so
  # discard_on dropped the job (acked) and retry_on enqueued a retry of it.
  def test_shutdown_hands_back_a_job_that_rescues_standard_error
    [TocsinRetryAllJob, TocsinDiscardAllJob].each do |klass|
      job = klass.perform_later
      run_worker(queues: %w[default], shutdown_timeout: 0) { klass::STARTED.pop }
      q = db.queue("default")
      got = q.get(job.provider_job_id)
      assert_equal "pending", got&.state, "#{klass}: handed back"
      assert_equal [1, Tocsin::ActiveJobSupport::RUNS + 1], [got.attempts, got.max_attempts]
      assert_equal 1, q.stats["pending"], "#{klass}: no retry enqueued"
      assert_equal 0, q.stats["scheduled"]
      q.cancel(job.provider_job_id)
    end
    refute Tocsin::JobCancelled <= StandardError
  end

  # A cancelled job is not enqueued again by retry_on StandardError.
  def test_a_cancelled_job_is_not_retried_by_retry_on_standard_error
    job = TocsinRetryAllJob.perform_later
    q = db.queue("default")
    run_worker(queues: %w[default]) do
      TocsinRetryAllJob::STARTED.pop
      q.cancel(job.provider_job_id)
      deadline = Time.now + 10
      sleep 0.05 until q.stats["processing"].zero? || Time.now > deadline
    end
    assert_equal [0, 0], [q.stats["pending"], q.stats["scheduled"]], "no retry of the cancelled job"
  end

  # A job whose class the worker lacks (renamed since) fails naming the class;
  # data naming a class that is no ActiveJob never instantiates it.
  def test_unknown_or_foreign_job_class_fails_naming_it
    q = db.queue("default")
    gone = q.call("active_job", TocsinIdJob.new.serialize.merge("job_class" => "TocsinRenamedAwayJob"))
    foreign = q.call("active_job", TocsinIdJob.new.serialize.merge("job_class" => "TocsinNotAJob"))
    junk = q.call("active_job", "text")
    run_worker(queues: %w[default]) do
      e = assert_raises(Tocsin::TaskError) { gone.value(timeout: 10) }
      assert_equal "Tocsin::ActiveJobSupport::UnknownJobClass", e.type
      assert_match(/job class TocsinRenamedAwayJob is not defined in this worker/, e.message)
      e = assert_raises(Tocsin::TaskError) { foreign.value(timeout: 10) }
      assert_match(/ArgumentError: job class TocsinNotAJob is not an ActiveJob::Base class/, e.message)
      e = assert_raises(Tocsin::TaskError) { junk.value(timeout: 10) }
      assert_match(/ArgumentError: not ActiveJob job data .*: String/, e.message)
    end
    assert TocsinNotAJob::MADE.empty?, "never instantiated"
  end

  # The adapter writes on its own connection, not in the app's transaction: Rails
  # 7.2+ is asked to enqueue after the commit (false enqueued at once: kept on a
  # rollback, or Busy behind the transaction's write lock on the same file).
  def test_enqueue_waits_for_the_transaction_commit
    assert ActiveJob::QueueAdapters::TocsinAdapter.new(db).enqueue_after_transaction_commit?
  end

  # A refusal names the job class; a wait_until at or before the epoch is due now
  # (it was refused as "run_at must be epoch milliseconds from 1"); a priority
  # whose negation is no 64-bit Integer names the job's priority.
  def test_refusals_name_the_job_and_write_nothing
    e = assert_raises(Tocsin::InvalidArgument) { TocsinTestJob.perform_later("x" => "\xFF".b.force_encoding("UTF-8")) }
    assert_match(/\ATocsinTestJob: args\[0\]\["arguments"\]\[0\]/, e.message)
    e = assert_raises(Tocsin::InvalidArgument) { TocsinTestJob.set(queue: "").perform_later("x") }
    assert_match(/\ATocsinTestJob: queue name must not be empty/, e.message)
    e = assert_raises(Tocsin::InvalidArgument) { TocsinTestJob.set(priority: -(2**63)).perform_later("x") }
    assert_match(/TocsinTestJob: priority must be between .*, not -9223372036854775808/, e.message)
    assert_equal 0, db.queue("mailers").stats["pending"]
    job = TocsinTestJob.set(wait_until: Time.at(0)).perform_later("x")
    assert_equal "pending", db.queue("mailers").get(job.provider_job_id).state
  end
end
