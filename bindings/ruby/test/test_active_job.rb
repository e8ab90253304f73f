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

class TocsinFailingJob < ActiveJob::Base
  def perform = raise(ArgumentError, "no such user")
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
end
