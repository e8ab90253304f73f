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

  task(ActiveJobSupport::TASK, ->(data) { ::ActiveJob::Base.execute(data); nil }, retries: 0)
end

module ActiveJob
  module QueueAdapters
    # config.active_job.queue_adapter = :tocsin
    class TocsinAdapter
      def initialize(database = nil)
        @database = database
      end

      def database = @database || Tocsin::ActiveJobSupport.database

      def enqueue(job)
        enqueue_at(job, nil)
      end

      # ActiveJob's priority runs lower numbers first (as Delayed Job, GoodJob and
      # Solid Queue do); tocsin claims higher ones first: the sign is flipped.
      def enqueue_at(job, timestamp)
        prio = job.priority
        unless prio.nil? || prio.is_a?(Integer)
          raise Tocsin::InvalidArgument, "#{job.class}: priority must be an Integer, not #{Tocsin::Util.kind(prio)}"
        end
        unless timestamp.nil? || (timestamp.is_a?(Numeric) && timestamp.real? && timestamp.to_f.finite?)
          raise Tocsin::InvalidArgument, "#{job.class}: the scheduled time must be epoch seconds, not #{Tocsin::Util.kind(timestamp)}"
        end

        # job.serialize: ActiveJob's own serialisation of the arguments (a Time,
        # a Symbol, a GlobalID become JSON values); a value it cannot serialise
        # raises ActiveJob::SerializationError, as in any adapter
        h = database.queue(job.queue_name || "default")
                    .call(Tocsin::ActiveJobSupport::TASK, job.serialize, max_attempts: 1,
                          priority: prio && -prio,
                          run_at: timestamp && (timestamp * 1000).round)
        job.provider_job_id = h.job_id
        h
      end

      # ActiveJob >= 7.1 asks whether enqueues inside a DB transaction should wait
      # for its commit; tocsin jobs can join the app's transaction instead (tx:).
      def enqueue_after_transaction_commit? = false
    end
  end
end
