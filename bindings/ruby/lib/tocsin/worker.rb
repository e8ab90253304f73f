# frozen_string_literal: true

module Tocsin
  # Raised inside a running task whose job was cancelled (or whose lease was lost),
  # or that still runs when a shutdown's shutdown_timeout has passed. Not a
  # StandardError (as Timeout's own interruption is not, Ruby 3.3's
  # Timeout::ExitException): a task's `rescue => e` -- ActiveJob's
  # `retry_on StandardError` / `discard_on StandardError` -- does not take it for
  # a failure of the job. As a Tocsin::Error, it was rescued there: at shutdown
  # the job was discarded (or a retry of it enqueued) instead of handed back, and a
  # cancelled job was enqueued again. `rescue Tocsin::JobCancelled` still takes it.
  class JobCancelled < Exception; end # rubocop:disable Lint/InheritException

  # What a running task may know (Tocsin.current_job, in the task's thread): job_id,
  # attempt, max_attempts, queue, task, meta; and #transaction, in which the job is
  # acked together with the task's own writes:
  #
  #   Tocsin.task("charge", queue: "orders") do |order_id, amount|
  #     Tocsin.current_job.transaction do |tx|
  #       tx.execute("INSERT INTO charges(order_id, amount) VALUES (#{order_id}, #{amount})")
  #       { "charged" => amount }            # the job's result
  #     end
  #   end
  #
  # The block's value is the job's result (the task's return value is then ignored).
  # A raise inside the block rolls back its writes and the ack: the job is retried
  # as for any failure. If the lease was lost meanwhile (another worker has the
  # job), Tocsin::LeaseLost is raised inside the block's transaction, which rolls
  # back: exactly-once effects for work whose effects live in this database.
  class JobContext
    attr_reader :job_id, :attempt, :max_attempts, :queue, :task, :meta

    def initialize(worker, run, job_id, attempt, max_attempts, queue, task, meta)
      @worker = worker
      @run = run
      @job_id = job_id
      @attempt = attempt
      @max_attempts = max_attempts
      @queue = queue
      @task = task
      @meta = meta
      @finished = false
      @used = false
    end

    # @api private: the run's outcome was recorded (inside a transaction)
    attr_accessor :finished

    def transaction
      raise InvalidArgument, "current_job.transaction takes a block" unless block_given?
      raise InvalidArgument, "this job's transaction was already used (one per run)" if @used

      @used = true
      @worker.db.transaction do |tx|
        value = yield tx
        # recorded by the worker's loop thread inside tx (tocsin_worker_finish with a
        # transaction handle); committed by this block's end
        unless @worker.finish_in(self, @run, tx, Util.dump(value, "result"))
          raise LeaseLost, "job #{@job_id}: the lease was lost (another worker has the job); " \
                           "the transaction is rolled back"
        end
        value
      end
    end
  end

  class << self
    # The JobContext of the task running in this thread; InvalidArgument outside one.
    def current_job
      Thread.current[:tocsin_job] ||
        raise(InvalidArgument, "Tocsin.current_job is only available inside a task run by a Tocsin::Worker")
    end
  end

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
                   scheduler_ttl: 10, shutdown_timeout: 30, tasks: Tocsin.tasks, periodic: Tocsin.periodic,
                   unknown_task_delay: nil, unknown_task_handbacks: nil)
      raise InvalidArgument, "db must be a Tocsin::Database, not #{Util.kind(db)}" unless db.is_a?(Database)
      unless tasks.is_a?(Hash) && tasks.each_value.all?(Task)
        raise InvalidArgument, "tasks must be a Hash of name => Tocsin::Task, not #{Util.kind(tasks)}"
      end
      raise InvalidArgument, "periodic must be an Array, not #{Util.kind(periodic)}" unless periodic.is_a?(Array)

      @db = db
      @tasks = tasks
      @periodic = periodic
      queues = tasks.values.map(&:queue).uniq if queues.nil?
      Util.array!(queues, "queues")
      @queues = queues.each_with_index.map { |q, i| db.native.check_name("queues[#{i}]", Util.name!(q, "queues[#{i}]")) }
      raise InvalidArgument, "give at least one queue (or register tasks)" if @queues.empty?
      unless concurrency.is_a?(Integer) && concurrency.between?(1, Native::MAX_BATCH)
        raise InvalidArgument, "concurrency must be an Integer between 1 and #{Native::MAX_BATCH}, not #{concurrency.inspect}"
      end

      @concurrency = concurrency
      @worker_id = worker_id.nil? ? Util.default_owner : Util.name!(worker_id, "worker_id")
      @visibility_ms = Util.ms(visibility, "visibility", nil_ok: false, min_ms: Native::MIN_WORKER_LEASE_MS)
      @scheduler = Util.bool!(scheduler, "scheduler")
      @scheduler_ttl_ms = Util.lease_ms(scheduler_ttl, "scheduler_ttl", nil_ok: true,
                                        min_ms: Native::MIN_WORKER_LEASE_MS)
      shutdown_ms = Util.ms(shutdown_timeout, "shutdown_timeout")
      raise InvalidArgument, "shutdown_timeout must be a number of seconds, not nil" if shutdown_ms.nil?

      @shutdown_timeout = shutdown_ms / 1000.0
      # a job of a task this worker lacks: handed back after unknown_task_delay seconds
      # (doubling, capped at 60; nil: 1), dead (UnknownTask) after unknown_task_handbacks (nil: 20)
      @unknown_task_delay_ms = Util.ms(unknown_task_delay, "unknown_task_delay", positive: true)
      unless unknown_task_handbacks.nil? || (unknown_task_handbacks.is_a?(Integer) && unknown_task_handbacks.between?(1, 1_000_000))
        raise InvalidArgument, "unknown_task_handbacks must be an Integer between 1 and 1000000, not #{unknown_task_handbacks.inspect}"
      end

      @unknown_task_handbacks = unknown_task_handbacks
      @done = ::Queue.new
      @work = ::Queue.new
      @running = {} # job_id => Thread
      @threads = [] # the pool (a thread that dies is replaced, under @lock)
      @pool_closing = false # run is ending: no thread is replaced any more
      @lock = Mutex.new
      @nlock = Mutex.new # the run threads' native calls vs close
      @closed = false
      @stop = false
      @closed_under = false # Database#close stopped the run (it raises Tocsin::Closed)
      @processed = 0
      @failed = 0
      @native = nil
      @stopped = ::Queue.new
    end

    # Runs until #stop (or INT/TERM when +trap_signals+): stops claiming, lets the
    # running handlers finish for shutdown_timeout seconds, then closes (the core
    # hands back whatever still runs: pending again, no attempt consumed). A second
    # INT/TERM (or #stop(now: true)) ends the wait at once: what runs is handed back. A
    # Database#close stops it the same way, and run then raises Tocsin::Closed
    # (as Go's Run returns ErrClosed): the worker ended because its database did.
    def run(trap_signals: false)
      Util.bool!(trap_signals, "trap_signals")
      @loop_thread = Thread.current
      # registered before the native worker opens: a Database#close from now on
      # stops this run (or, begun already, refuses it with Tocsin::Closed) rather
      # than find the database still in use by a worker it did not know of
      @db.worker_started(self)
      begin
        open_native # (a failed open leaves the process's signal handlers as they were)
      rescue Exception # rubocop:disable Lint/RescueException -- unregistered, re-raised
        @db.worker_stopped(self)
        @stopped.close
        raise
      end
      old = trap_signals ? install_traps : {}
      @lock.synchronize { @concurrency.times { @threads << Thread.new { pool_loop } } }
      begin
        loop_until_stopped
        drain_running
      ensure
        # every step below runs whatever the one before did: a close skipped left
        # Database#close waiting for this worker forever
        begin
          stop_pool
          finish_done
        ensure
          @nlock.synchronize do
            @closed = true
            @native.close
          end
          @db.worker_stopped(self)
          @stopped.close
          old.each { |sig, h| Signal.trap(sig, h) }
        end
      end
      raise Closed, "the database was closed while the worker ran" if @closed_under

      self
    end

    # @api private
    attr_reader :loop_thread

    # Waits until #run has returned (the native worker closed).
    def wait_stopped
      @stopped.pop
      nil
    end

    # Asks the loop to stop (safe from any thread and from a signal handler); with
    # now: true the running handlers get no more time (their jobs are handed back).
    def stop(now: false)
      Util.bool!(now, "now")
      @hurry = true if now
      @stop = true
      @native&.poke
    end

    # @api private (Database#close): stops the run, which then raises
    # Tocsin::Closed -- unless it was asked to stop before.
    def stop_for_close
      @closed_under = true unless @stop
      stop
    end

    def stopping? = @stop
    def in_flight = @lock.synchronize { @running.size }

    private

    def install_traps
      # a second signal: hand back at once (docs/worker-protocol.md, Shutdown)
      %w[INT TERM].to_h { |sig| [sig, Signal.trap(sig) { stop(now: @stop) }] }
    end

    def open_native
      @native = Native::Worker.open(@db.native, @worker_id, @queues, @concurrency, @visibility_ms, @scheduler,
                                    @scheduler_ttl_ms, @unknown_task_delay_ms, @unknown_task_handbacks)
      # (docs/worker-protocol.md: every binding warns of it, as Python and Node do)
      # (not with a task that runs any queue's jobs: ActiveJob's, where queue_as names the queue)
      (@tasks.each_value.any?(&:serves_any_queue?) ? [] : @queues - @tasks.each_value.map(&:queue)).each do |q|
        warn "tocsin worker: no task is registered for queue #{q.inspect} in this process: its jobs " \
             "will be handed back (and die as UnknownTask after a bound)"
      end
      @tasks.each_value do |t|
        # retries bound the runs of the task's jobs here, whatever a call by name allowed
        @native.register(t.name, t.backoff_ms, nil, t.timeout_ms, t.result_ttl_ms, t.retries + 1)
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
        begin
          runs = @native.next(CANCEL_CHECK_MS)
        rescue Tocsin::Closed
          raise
        rescue Tocsin::Error => e
          # a step that failed (the lock held past the busy timeout, a schedule
          # that cannot fire): nothing is lost, and the core tries the step again
          # after a pause (the next call waits it out)
          warn "tocsin worker: upkeep failed (retrying): #{e.class}: #{e.message}"
          next
        end
        next if runs.nil? # poked: an outcome to report, or stop

        runs.each { |r| @work << r }
      end
    end

    # Waits for the running handlers (up to shutdown_timeout), reporting outcomes.
    # The core claims and hands out nothing more (drain), and its upkeep goes on
    # meanwhile: the running jobs' leases are renewed and their outcomes committed
    # (without it a shutdown_timeout longer than what was left of a lease let the
    # job be claimed again while its handler still ran).
    def drain_running
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + @shutdown_timeout
      @native.drain
      loop do
        finish_done
        break if @lock.synchronize { @running.empty? } && @work.empty?
        break if @hurry

        left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        break if left <= 0

        begin
          @native.next([(left * 1000).ceil, 50].min) # (no run: a draining worker hands out none)
          cancel_running
        rescue Tocsin::Error # closed, or a step that failed: the handlers still get their time
          sleep([left, 0.05].min)
        end
      end
      # handlers still running: interrupt them; the core hands their jobs back at close
      @lock.synchronize { @running.each_value { |th| th.raise(JobCancelled, "worker shutting down") } }
    end

    def finish_done
      until @done.empty?
        item = @done.pop
        if item[0] == :tx
          finish_tx(*item[1..])
          next
        end
        run, ctx, kind, value, type, msg, trace = item
        next if ctx.finished # recorded inside the task's transaction

        @native.finish(run, nil, kind, value, type, msg, trace, -1)
      end
    end

    # On the loop thread: the outcome written inside the task's transaction.
    def finish_tx(ctx, run, tx, json, reply)
      ok = @native.finish(run, tx.native, Native::OUTCOME_OK, json, nil, nil, nil, -1)
      ctx.finished = true # released, recorded or (false) the lease was lost
      reply << ok
    rescue StandardError => e
      reply << e
    end

    public

    # @api private: called from the task's thread (JobContext#transaction); the loop
    # thread records the outcome inside tx (the core's step never waits for the
    # write lock while a transaction handle of its database is open). true, or
    # false when the lease is no longer this run's.
    def finish_in(ctx, run, tx, json)
      reply = ::Queue.new
      @done << [:tx, ctx, run, tx, json, reply]
      @native.poke
      r = reply.pop
      raise r if r.is_a?(Exception)

      @lock.synchronize { @processed += 1 } if r
      r
    end

    private

    def cancel_running
      ids = @native.cancelled
      return if ids.empty?

      @lock.synchronize do
        ids.each { |id| @running[id]&.raise(JobCancelled, "job #{id} was cancelled") }
      end
    end

    # The pool's threads: each runs one run at a time until the nil that ends it.
    # A thread that dies some other way (a task's Thread.exit or Thread#kill) is
    # replaced, so the worker never runs with fewer slots than it claims for.
    def pool_loop
      Thread.current.report_on_exception = false
      ended = false
      while (item = @work.pop)
        begin
          run_one(item)
        rescue JobCancelled, TaskTimeout
          nil # came as its run ended (the outcome is recorded): nothing left to stop
        end
      end
      ended = true
    ensure
      @lock.synchronize do
        @threads.delete(Thread.current)
        @threads << Thread.new { pool_loop } unless ended || @pool_closing
      end
    end

    # Ends the pool (run's end): the threads still running after drain_running
    # are given half a second, then killed (their runs are handed back).
    def stop_pool
      @lock.synchronize { @pool_closing = true }
      @lock.synchronize { @threads.size }.times { @work << nil }
      @lock.synchronize { @threads.dup }.each do |t|
        t.join(0.5) || t.kill
      rescue Exception => e # rubocop:disable Lint/RescueException -- a pool thread's own death: the close goes on
        warn "tocsin worker: a pool thread died: #{e.class}: #{e.message}"
      end
    end

    # One run, whose outcome is always reported -- whatever the task raised, also
    # when its thread is killed -- so its job never stays leased to a slot that is
    # gone. Interrupts (Thread#raise, #kill, a cancellation) reach the task only;
    # the bookkeeping around it runs whole.
    def run_one(item)
      run, job_id, _token, queue, task, args, kwargs, meta, attempt, max, timeout_ms = item
      ctx = nil
      outcome = nil
      Thread.handle_interrupt(Object => :never) do
        begin
          Thread.handle_interrupt(Object => :immediate) do
            ctx = JobContext.new(self, run, job_id, attempt, max, queue, task, Util.load(meta))
            @lock.synchronize { @running[job_id] = Thread.current }
            Thread.current[:tocsin_job] = ctx
            outcome = execute(ctx, task, args, kwargs, timeout_ms)
          end
        rescue JobCancelled => e
          outcome ||= [Native::OUTCOME_HAND_BACK, nil, "Cancelled", e.message, nil]
        ensure
          Thread.current[:tocsin_job] = nil
          @lock.synchronize { @running.delete(job_id) }
          outcome ||= unfinished_outcome
          report(run, job_id, outcome) unless ctx&.finished # else recorded inside the task's transaction
        end
      end
    end

    # The outcome of a run that never returned: its thread was killed -- by the
    # worker's shutdown (handed back) or by the task itself (failed: retried).
    def unfinished_outcome
      if @pool_closing
        [Native::OUTCOME_HAND_BACK, nil, "Cancelled", "worker shutting down", nil]
      else
        @lock.synchronize { @failed += 1 }
        [Native::OUTCOME_ERROR, nil, "Killed", "the task's thread was killed before the run ended (Thread#kill, Thread.exit)", nil]
      end
    end

    # From the run's thread: the outcome goes into the core's batch (its next group
    # commit), then the runs the core reserved for the free slots, so that a slot does
    # not wait for the loop thread. @nlock keeps these calls apart from close.
    def report(run, job_id, outcome)
      runs = @nlock.synchronize do
        next [] if @closed

        @native.finish(run, nil, *outcome, -1)
        @stop ? [] : @native.take
      end
      runs.each { |r| @work << r }
    rescue Tocsin::InvalidArgument, Tocsin::TooBig => e
      # an outcome the native layer refuses still ends the run (a final failure
      # naming why, as the core records one it cannot store): left unrecorded, the
      # job kept its lease and the run its slot until the worker stopped
      warn "tocsin worker: recording job #{job_id} failed: #{e.message}"
      retry_as_refused(run, e)
    rescue Tocsin::Error => e
      warn "tocsin worker: recording job #{job_id} failed: #{e.message}"
    end

    def retry_as_refused(run, err)
      @nlock.synchronize do
        next if @closed

        @native.finish(run, nil, Native::OUTCOME_FAIL, nil, "InvalidOutcome",
                       "the outcome was refused: #{error_text(err.message)}", nil, -1)
      end
    rescue Tocsin::Error => e
      warn "tocsin worker: recording a refused outcome failed: #{e.message}"
    end

    # -> [kind, value_json, error_type, error_message, trace]
    def execute(ctx, task_name, args_json, kwargs_json, timeout_ms)
      task = @tasks.fetch(task_name)
      args = args_json == "[]" ? [] : Util.parse(args_json)
      kwargs = kwargs_json == "{}" ? {} : Util.parse(kwargs_json)
      value = if timeout_ms.positive?
                ::Timeout.timeout(timeout_ms / 1000.0, TaskTimeout) { task.run(args, kwargs) }
              else
                task.run(args, kwargs)
              end
      return [Native::OUTCOME_OK, nil, nil, nil, nil] if ctx.finished # counted by finish_in

      begin
        json = value.nil? ? "null" : Util.dump(value, "result")
      rescue StandardError => e
        @lock.synchronize { @failed += 1 }
        return [Native::OUTCOME_FAIL, nil, "SerializationError", "the result is not JSON: #{e.message}", nil]
      end
      @lock.synchronize { @processed += 1 }
      [Native::OUTCOME_OK, json, nil, nil, nil]
    rescue TaskTimeout
      @lock.synchronize { @failed += 1 }
      # no message: the core writes its own, the same in every runtime
      [Native::OUTCOME_ERROR, nil, "Timeout", nil, nil]
    rescue JobCancelled
      raise
    rescue Exception => e # rubocop:disable Lint/RescueException -- a task's failure is data
      # any class: also exit (SystemExit), Interrupt, NoMemoryError -- a failed run,
      # retried as any other (as in Sidekiq); re-raised, it ended the thread with
      # no outcome recorded (the job leased forever, the slot lost) and a
      # SystemExit went on to the main thread. A FinalFailure ends the job now, as
      # its cause, with no retry (ActiveJob's: its own retry_on retried it
      # already; the attempts left are for a worker that died mid-run).
      @lock.synchronize { @failed += 1 } unless ctx.finished
      final = e.is_a?(FinalFailure)
      e = e.cause || e if final
      [final ? Native::OUTCOME_FAIL : Native::OUTCOME_ERROR, nil, e.class.name || "Error", error_text(e.message),
       error_text((e.backtrace || []).join("\n"))]
    end

    # An error's message or trace as the core takes it, as every runtime's worker
    # gives it (Go's too): UTF-8 (a byte that begins no character is U+FFFD) without
    # NUL characters, which a C string cannot hold. A message with a NUL was refused
    # by the native finish: the run was never recorded, its job held its lease and
    # its slot until the worker stopped.
    def error_text(s)
      s = s.to_s
      s = s.dup.force_encoding(Encoding::UTF_8) if s.encoding == Encoding::BINARY
      s = s.encode(Encoding::UTF_8, invalid: :replace, undef: :replace) unless s.encoding == Encoding::UTF_8
      s.scrub.delete("\0")
    end

    class TaskTimeout < Exception; end # rubocop:disable Lint/InheritException -- not rescued by tasks

    # Raised (from a rescue) by a task whose error must end its job now, with no
    # retry: the run fails as its `cause`, recorded final (dead, reason
    # "failed"). What the ActiveJob task raises. Not a StandardError either.
    class FinalFailure < Exception; end # rubocop:disable Lint/InheritException
  end
end
