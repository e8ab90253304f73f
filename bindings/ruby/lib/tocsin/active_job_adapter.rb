# frozen_string_literal: true

require "tocsin"
require "active_job"

module Tocsin
  # ActiveJob on tocsin: jobs are task calls of "active_job" (the job's serialized
  # Hash as the one argument) on the job's queue, so a Rails app switches with
  #   config.active_job.queue_adapter = :tocsin
  # and runs `tocsin-worker --require ./config/environment.rb --queue default`.
  # The database is Tocsin::ActiveJobSupport.database = db (default: TOCSIN_DB).
  module ActiveJobSupport
    TASK = "active_job"
    # Runs of one ActiveJob job: an exception that leaves perform ends it at once
    # (retries are ActiveJob's own, retry_on); the other runs are for a worker that
    # died mid-run (kill -9, a lost machine): its job runs again, as in Solid Queue
    # and GoodJob, and a job that kills every worker that runs it dies after these.
    RUNS = 3

    class << self
      attr_writer :database

      def database
        @database ||= begin
          path = ENV["TOCSIN_DB"] or raise Error, "set Tocsin::ActiveJobSupport.database (or TOCSIN_DB)"
          Tocsin.open(path)
        end
      end
    end
  end

  module ActiveJobSupport
    # A job whose class this worker does not have (its run fails with this type).
    class UnknownJobClass < Error; end

    # The task's body (on a worker): the job runs with its tocsin job id as its
    # provider_job_id, as in Rails' own adapters (Sidekiq's jid). The job data is
    # checked first: a Hash naming a loaded ActiveJob class (ActiveJob would call
    # .new on whatever class the text names, and say "undefined method
    # `constantize' for nil" of a missing one).
    def self.perform(data)
      # in a Rails app, the class is looked up inside the app's reloader (as
      # ActiveJob's execute runs; nested, that wrap is a no-op): not beside a reload
      app = defined?(::Rails) && ::Rails.respond_to?(:application) && ::Rails.application
      return app.reloader.wrap { execute(data) } if app.respond_to?(:reloader)

      execute(data)
    rescue Tocsin::JobCancelled, Tocsin::Worker::TaskTimeout
      raise
    rescue Exception # rubocop:disable Lint/RescueException -- any error of perform is the job's failure
      # final: not retried by tocsin (the job's other runs are for a worker's death)
      raise Tocsin::Worker::FinalFailure
    end

    private_class_method def self.execute(data)
      unless data.is_a?(Hash) && data["job_class"].is_a?(String)
        raise ArgumentError, "not ActiveJob job data (a Hash with a \"job_class\" String): #{Util.kind(data)}"
      end

      name = data["job_class"]
      klass = begin
        Object.const_get(name)
      rescue NameError
        raise UnknownJobClass, "job class #{name} is not defined in this worker (renamed or removed since the " \
                               "job was enqueued, or the app not loaded: tocsin-worker --require)"
      end
      raise ArgumentError, "job class #{name} is not an ActiveJob::Base class" unless klass.is_a?(Class) && klass <= ::ActiveJob::Base

      job = Tocsin.current_job
      ::ActiveJob::Base.execute(data.merge("provider_job_id" => job.job_id))
      nil
    end
  end

  task(ActiveJobSupport::TASK, ActiveJobSupport.method(:perform), retries: ActiveJobSupport::RUNS - 1).serves_any_queue!
end

module ActiveJob
  module QueueAdapters
    # config.active_job.queue_adapter = :tocsin
    class TocsinAdapter
      PRIORITY_MAX = (2**63) - 1

      # Errors of the store, not of the job: the write lock not had within
      # busy_timeout, a closed database, a full disk, a file it cannot write.
      # ActiveJob (7.0+) defines ActiveJob::EnqueueError for them: perform_later
      # then returns false and job.enqueue_error says why, as with any backend that
      # is down. A job that cannot be enqueued (a bad priority, an argument JSON
      # cannot carry) still raises.
      UNAVAILABLE = [Tocsin::Busy, Tocsin::Closed, Tocsin::ReadOnly, Tocsin::IOError, Tocsin::Full,
                     Tocsin::CantOpen, Tocsin::PermissionDenied, Tocsin::Corrupt, Tocsin::Replaced,
                     Tocsin::NoMemory].freeze

      def initialize(database = nil)
        @database = database
      end

      def database = @database || Tocsin::ActiveJobSupport.database

      def enqueue(job)
        enqueue_at(job, nil)
      end

      # ActiveJob's priority runs lower numbers first (as Delayed Job, GoodJob and
      # Solid Queue do); tocsin claims higher ones first: the sign is flipped.
      # ActiveJob >= 7.1's perform_all_later: every job in one transaction, all or
      # none (a refused one raises naming its class, and none is enqueued). Returns how
      # many were enqueued.
      # A store that is unavailable (UNAVAILABLE, with ActiveJob 7.0+) enqueues none
      # and raises nothing: each job's enqueue_error is set and 0 is returned, as
      # ActiveJob does for an adapter without enqueue_all.
      def enqueue_all(jobs)
        begin
          store_errors("perform_all_later") do
            database.transaction do |tx|
              jobs.each do |job|
                at = job.scheduled_at
                enqueue_at(job, at.nil? || at.is_a?(Numeric) ? at : at.to_f, tx: tx)
              end
            end
          end
        rescue Exception => e # rubocop:disable Lint/RescueException -- rolled back: no job has an id
          jobs.each { |job| job.provider_job_id = nil }
          raise unless defined?(::ActiveJob::EnqueueError) && e.is_a?(::ActiveJob::EnqueueError)

          jobs.each do |job|
            job.successfully_enqueued = false if job.respond_to?(:successfully_enqueued=)
            job.enqueue_error = e if job.respond_to?(:enqueue_error=)
          end
          return 0
        end
        jobs.each { |job| job.successfully_enqueued = true if job.respond_to?(:successfully_enqueued=) }
        jobs.size
      end

      def enqueue_at(job, timestamp, tx: nil)
        prio = job.priority
        unless prio.nil? || prio.is_a?(Integer)
          raise Tocsin::InvalidArgument, "#{job.class}: priority must be an Integer, not #{Tocsin::Util.kind(prio)}"
        end
        # (stored negated: -2**63 has no 64-bit negation)
        unless prio.nil? || prio.abs <= PRIORITY_MAX
          raise Tocsin::InvalidArgument, "#{job.class}: priority must be between #{-PRIORITY_MAX} and #{PRIORITY_MAX}, not #{prio}"
        end
        unless timestamp.nil? || (timestamp.is_a?(Numeric) && timestamp.real? && timestamp.to_f.finite?)
          raise Tocsin::InvalidArgument, "#{job.class}: the scheduled time must be epoch seconds, not #{Tocsin::Util.kind(timestamp)}"
        end

        # (a scheduled time at or before the epoch -- wait_until: Time.at(0) -- is a
        # time past, as any other: the job is due now; run_at: takes 1 ms on)
        # job.serialize: ActiveJob's own serialisation of the arguments (a Time,
        # a Symbol, a GlobalID become JSON values); a value it cannot serialise
        # raises ActiveJob::SerializationError, as in any adapter
        h = store_errors(job.class) do
          database.queue(job.queue_name || "default")
                  .call(Tocsin::ActiveJobSupport::TASK, job.serialize, max_attempts: Tocsin::ActiveJobSupport::RUNS,
                        priority: prio && -prio,
                        run_at: timestamp && [(timestamp * 1000).round, 1].max, tx: tx)
        rescue Tocsin::Error => e
          # which job: the refusal names the place in the job's data
          # (args[0]["arguments"][1] is its second argument)
          raise e.exception("#{job.class}: #{e.message}")
        end
        job.provider_job_id = h.job_id
        h
      end

      # UNAVAILABLE errors as ActiveJob::EnqueueError (when ActiveJob has it), the
      # message led by `what` once, the tocsin error its cause.
      private def store_errors(what)
        yield
      rescue *UNAVAILABLE => e
        raise unless defined?(::ActiveJob::EnqueueError)

        raise ::ActiveJob::EnqueueError, (e.message.start_with?("#{what}: ") ? e.message : "#{what}: #{e.message}")
      end

      # ActiveJob >= 7.2 asks whether a perform_later inside an Active Record
      # transaction should wait for its commit: yes. The adapter writes on its own
      # connection (Tocsin::ActiveJobSupport.database), not in the app's transaction:
      # a job enqueued at once was kept when the transaction rolled back, and could
      # run before its commit (and, on the same database file, waited for the
      # transaction's write lock, then raised Tocsin::Busy). For a job in the app's
      # own transaction: Tocsin::SQL (README, ActiveJob).
      def enqueue_after_transaction_commit? = true
    end
  end
end
