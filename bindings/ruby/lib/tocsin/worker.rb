# frozen_string_literal: true

module Tocsin
  # Raised inside a running task whose job was cancelled (or whose lease was lost).
  class JobCancelled < Error; end

  # The worker runner, on the C worker protocol (tocsin_worker_*): the core claims,
  # renews leases, decides retries and backoff, hands back unknown tasks, leads the
  # scheduler and does the housekeeping; this class only runs handlers on a pool
  # of +concurrency+ threads and reports each outcome.
  #
  #   Tocsin.task("send_email", queue: "emails") { |to, subject:| ... }
  #   Tocsin::Worker.new(db, queues: ["emails"], concurrency: 4).run   # until #stop / INT / TERM
  #
  # Only the loop thread calls the native worker; handler threads hand their
  # outcomes back through a queue and poke the loop.
  class Worker
    CANCEL_CHECK_MS = 500
    attr_reader :db, :worker_id, :queues, :processed, :failed

    def initialize(db, queues: nil, concurrency: 1, worker_id: nil, visibility: 30, scheduler: true,
                   scheduler_ttl: 10, shutdown_timeout: 30, tasks: Tocsin.tasks, periodic: Tocsin.periodic)
      @db = db
      @tasks = tasks
      @periodic = periodic
      @queues = (queues || tasks.values.map(&:queue).uniq).map(&:to_s)
      raise InvalidArgument, "give at least one queue (or register tasks)" if @queues.empty?
      raise InvalidArgument, "concurrency must be an Integer >= 1" unless concurrency.is_a?(Integer) && concurrency >= 1

      @concurrency = concurrency
      @worker_id = worker_id
      @visibility_ms = Util.ms(visibility, "visibility")
      @scheduler = scheduler
      @scheduler_ttl_ms = Util.ms(scheduler_ttl, "scheduler_ttl")
      @shutdown_timeout = shutdown_timeout
      @done = ::Queue.new
      @work = ::Queue.new
      @running = {} # job_id => Thread
      @lock = Mutex.new
      @stop = false
      @processed = 0
      @failed = 0
      @native = nil
      @stopped = ::Queue.new
    end

    # Runs until #stop (or INT/TERM when +trap_signals+): stops claiming, lets the
    # running handlers finish for shutdown_timeout seconds, then closes (the core
    # hands back whatever still runs: pending again, no attempt consumed).
    def run(trap_signals: false)
      old = trap_signals ? install_traps : {}
      @loop_thread = Thread.current
      open_native
      @db.worker_started(self)
      threads = Array.new(@concurrency) { |i| Thread.new { pool_loop(i) } }
      begin
        loop_until_stopped
        drain_running
      ensure
        @concurrency.times { @work << nil }
        threads.each { |t| t.join(0.5) || t.kill }
        begin
          finish_done
        ensure
          @native.close
          @db.worker_stopped(self)
          @stopped.close
          old.each { |sig, h| Signal.trap(sig, h) }
        end
      end
      self
    end

    # @api private
    attr_reader :loop_thread

    # Waits until #run has returned (the native worker closed).
    def wait_stopped
      @stopped.pop
      nil
    end

    # Asks the loop to stop (safe from any thread and from a signal handler).
    def stop
      @stop = true
      @native&.poke
    end

    def stopping? = @stop
    def in_flight = @lock.synchronize { @running.size }

    private

    def install_traps
      %w[INT TERM].to_h { |sig| [sig, Signal.trap(sig) { stop }] }
    end

    def open_native
      @native = Native::Worker.open(@db.native, @worker_id, @queues, @concurrency, @visibility_ms, @scheduler,
                                    @scheduler_ttl_ms)
      @tasks.each_value do |t|
        @native.register(t.name, t.backoff_ms, nil, t.timeout_ms, t.result_ttl_ms)
      end
      register_periodic if @scheduler
    end

    # Periodic tasks: schedule "periodic:<task>" whose payload is the call's envelope
    # (written when a worker starts, never at load time).
    def register_periodic
      @periodic.each do |p|
        t = @tasks[p[:task]]
        queue = t ? t.queue : @queues.first
        env = @db.native.task_envelope(p[:task], Util.dump(p[:args]), Util.dump(p[:kwargs]), nil, nil)
        @db.native.schedule_set("periodic:#{p[:task]}", p[:cron], queue, env, nil)
      end
    end

    def loop_until_stopped
      until @stop
        finish_done
        cancel_running
        # bounded, so that cancellations found by the core's upkeep reach the
        # running handlers within about half a second
        runs = @native.next(CANCEL_CHECK_MS)
        next if runs.nil? # poked: an outcome to report, or stop

        runs.each { |r| @work << r }
      end
    end

    # Waits for the running handlers (up to shutdown_timeout), reporting outcomes.
    def drain_running
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + @shutdown_timeout
      loop do
        finish_done
        break if @lock.synchronize { @running.empty? } && @work.empty?

        left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        break if left <= 0

        sleep([left, 0.05].min)
      end
      # handlers still running: interrupt them; the core hands their jobs back at close
      @lock.synchronize { @running.each_value { |th| th.raise(JobCancelled, "worker shutting down") } }
    end

    def finish_done
      until @done.empty?
        run, kind, value, type, msg, trace = @done.pop
        @native.finish(run, nil, kind, value, type, msg, trace, -1)
      end
    end

    def cancel_running
      ids = @native.cancelled
      return if ids.empty?

      @lock.synchronize do
        ids.each { |id| @running[id]&.raise(JobCancelled, "job #{id} was cancelled") }
      end
    end

    def pool_loop(_i)
      Thread.current.report_on_exception = false
      while (item = @work.pop)
        run, job_id, _token, _queue, task, args, kwargs, _meta, _attempt, _max, timeout_ms = item
        @lock.synchronize { @running[job_id] = Thread.current }
        outcome = begin
          execute(task, args, kwargs, timeout_ms)
        rescue JobCancelled => e
          [Native::OUTCOME_HAND_BACK, nil, "Cancelled", e.message, nil]
        ensure
          @lock.synchronize { @running.delete(job_id) }
        end
        @done << [run, *outcome]
        @native.poke
      end
    end

    # -> [kind, value_json, error_type, error_message, trace]
    def execute(task_name, args_json, kwargs_json, timeout_ms)
      task = @tasks.fetch(task_name)
      args = JSON.parse(args_json)
      kwargs = JSON.parse(kwargs_json)
      value = if timeout_ms.positive?
                ::Timeout.timeout(timeout_ms / 1000.0, TaskTimeout) { task.run(args, kwargs) }
              else
                task.run(args, kwargs)
              end
      begin
        json = JSON.generate(value)
      rescue StandardError => e
        @lock.synchronize { @failed += 1 }
        return [Native::OUTCOME_FAIL, nil, "SerializationError", "the result is not JSON: #{e.message}", nil]
      end
      @lock.synchronize { @processed += 1 }
      [Native::OUTCOME_OK, json, nil, nil, nil]
    rescue TaskTimeout
      @lock.synchronize { @failed += 1 }
      [Native::OUTCOME_ERROR, nil, "Timeout", "the run exceeded #{timeout_ms} ms", nil]
    rescue JobCancelled
      raise
    rescue Exception => e # rubocop:disable Lint/RescueException -- a task's failure is data
      raise if e.is_a?(SystemExit) || e.is_a?(NoMemoryError)

      @lock.synchronize { @failed += 1 }
      [Native::OUTCOME_ERROR, nil, e.class.name || "Error", e.message, (e.backtrace || []).join("\n")]
    end

    class TaskTimeout < Exception; end # rubocop:disable Lint/InheritException -- not rescued by tasks
  end
end
