# frozen_string_literal: true

module Tocsin
  # A job as stored (live or dead). The lease operations take its fencing token:
  # a stale holder (its lease reclaimed by another worker) gets false.
  class Job
    FIELDS = %i[id queue_name state payload_json meta_json priority attempts max_attempts token run_at
                created_at lease_until expires_at unique_key worker last_error reason died_at].freeze
    attr_reader(*FIELDS)

    def initialize(queue, row)
      @queue = queue
      @id, @queue_name, @state, @payload_json, @meta_json, @priority, @attempts, @max_attempts, @token,
        @run_at, @created_at, @lease_until, @expires_at, @unique_key, @worker, @last_error, @reason,
        @died_at = row
      @finished = false
    end

    def payload = (@payload ||= [Util.parse(@payload_json)]).first
    def meta = Util.load(@meta_json)
    def queue = @queue
    def finished? = @finished

    def ack(tx: nil) = finish(@queue.db.handle(tx).ack(@id, @token))
    def retry(delay: nil, error: nil, tx: nil) = finish(@queue.retry(self, delay: delay, error: error, tx: tx))
    def fail(error: nil, tx: nil) = finish(@queue.fail(self, error: error, tx: tx))
    def heartbeat(extend: 30) = @queue.heartbeat(self, extend: extend)
    def hand_back(delay: 0, tx: nil) = finish(@queue.hand_back(self, delay: delay, tx: tx))
    def cancel = finish(@queue.cancel(id))

    def to_h = FIELDS.to_h { |f| [f, public_send(f)] }.merge(payload: payload, meta: meta)
    def ==(other) = other.is_a?(Job) && other.id == id && other.token == token
    alias eql? ==
    def hash = [id, token].hash
    def inspect = "#<Tocsin::Job #{id} #{@queue_name} #{state} attempt #{attempts}/#{max_attempts}>"

    private

    def finish(ok)
      @finished = true if ok
      ok
    end
  end

  # A named queue of a database (Database#queue).
  class Queue
    DEFAULT_VISIBILITY = 30
    DEFAULT_VISIBILITY_MS = DEFAULT_VISIBILITY * 1000
    attr_reader :db, :name

    def initialize(db, name)
      @db = db
      @name = name
    end

    def inspect = "#<Tocsin::Queue #{@name}>"

    # Enqueues +payload+ (any JSON value); returns the job id. Options: priority:,
    # delay: seconds, run_at: Time/ms, max_attempts:, expires: seconds, unique_key:,
    # meta: Hash of headers, tx: a Transaction to join.
    def enqueue(payload = nil, tx: nil, priority: nil, delay: nil, run_at: nil, max_attempts: nil,
                expires: nil, unique_key: nil, meta: nil)
      # (nil checks: false is no option's "not given" -- enqueue_opts refuses it)
      opts = unless priority.nil? && delay.nil? && run_at.nil? && max_attempts.nil? && expires.nil? &&
                    unique_key.nil? && meta.nil?
               enqueue_opts(priority, delay, run_at, max_attempts, expires, unique_key, meta)
             end
      @db.handle(tx).enqueue(@name, Util.dump(payload), opts)
    end

    # Enqueues every job atomically: each entry a payload or a job spec, a Hash
    # with a payload key { payload:, priority:, delay:, ... } -- its keys Symbols or
    # Strings ("payload" is a spec too). A Hash with a payload key of its own
    # goes as { payload: that_hash }. Returns the ids.
    def enqueue_many(jobs, tx: nil)
      Util.array!(jobs, "jobs")
      specs = jobs.each_with_index.map do |j, i|
        if j.is_a?(Hash) && (j.key?(:payload) || j.key?("payload"))
          o = j.transform_keys { |k| k.is_a?(String) ? k.to_sym : k }
          if o.size < j.size
            twice = j.keys.group_by { |k| k.is_a?(String) ? k.to_sym : k }.select { |_, ks| ks.size > 1 }.keys
            raise InvalidArgument, "jobs[#{i}] gives #{twice.map(&:inspect).join(", ")} twice (as a Symbol and a String key)"
          end
          bad = o.keys - %i[payload priority delay run_at max_attempts expires unique_key meta]
          raise InvalidArgument, "jobs[#{i}]: unknown job option(s): #{bad.map(&:inspect).join(", ")}" unless bad.empty?

          [@name, Util.dump(o[:payload], "jobs[#{i}][:payload]"),
           enqueue_opts(o[:priority], o[:delay], o[:run_at], o[:max_attempts], o[:expires], o[:unique_key], o[:meta],
                        "jobs[#{i}] ")]
        else
          [@name, Util.dump(j, "jobs[#{i}]"), nil]
        end
      end
      @db.handle(tx).enqueue_many(specs)
    end

    # Claims one job for +worker_id+ (leased for +visibility+ seconds), or nil.
    def claim(worker_id, visibility: DEFAULT_VISIBILITY)
      vis = visibility.equal?(DEFAULT_VISIBILITY) ? DEFAULT_VISIBILITY_MS : Util.ms(visibility, "visibility", nil_ok: false, min_ms: 1)
      row = @db.native.claim(@name, Util.name!(worker_id, "worker_id"), 1, vis)[0]
      row && Job.new(self, row)
    end

    def claim_batch(n, worker_id, visibility: DEFAULT_VISIBILITY)
      Util.int!(n, "claim count")
      @db.native.claim(@name, Util.name!(worker_id, "worker_id"), n, Util.ms(visibility, "visibility", nil_ok: false, min_ms: 1))
         .map { |r| Job.new(self, r) }
    end

    def ack(job, token = nil, tx: nil)
      id, tok = id_token(job, token)
      @db.handle(tx).ack(id, tok)
    end

    # Acks [Job or [id, token]] in one transaction; returns how many held.
    def ack_batch(jobs, tx: nil)
      Util.array!(jobs, "ack_batch's jobs")
      pairs = jobs.each_with_index.map do |j, i|
        next [j.id, j.token] if j.is_a?(Job)
        next j if j.is_a?(Array) && j.size == 2

        raise InvalidArgument, "ack_batch entry #{i} must be a Job or an [id, token] pair, not #{Util.kind(j)}"
      end
      @db.handle(tx).ack_batch(pairs.map(&:first), pairs.map(&:last))
    end

    # Back to pending after +delay+ seconds (nil: the core's exponential backoff),
    # or dead when attempts are spent.
    def retry(job, token = nil, delay: nil, error: nil, tx: nil)
      id, tok = id_token(job, token)
      @db.handle(tx).retry(id, tok, Util.ms(delay, "delay"), Util.str!(error, "error", nil_ok: true))
    end

    def fail(job, token = nil, error: nil, tx: nil)
      id, tok = id_token(job, token)
      @db.handle(tx).fail(id, tok, Util.str!(error, "error", nil_ok: true))
    end

    # Hands a claimed job back unrun: pending again after +delay+ seconds, no
    # attempt consumed (for a worker that claimed more than it will run).
    def hand_back(job, token = nil, delay: 0, tx: nil)
      id, tok = id_token(job, token)
      @db.handle(tx).hand_back(id, tok, Util.ms(delay, "delay", nil_ok: false))
    end

    def heartbeat(job, token = nil, extend: DEFAULT_VISIBILITY)
      id, tok = id_token(job, token)
      @db.native.heartbeat(id, tok, Util.ms(extend, "extend", nil_ok: false, min_ms: 1))
    end

    def cancel(job) = @db.native.cancel(job.is_a?(Job) ? job.id : job)

    def get(job_id)
      r = @db.native.job(job_id)
      r && Job.new(@db.queue(r[1]), r)
    end

    def pause = @db.native.pause(@name)
    def resume = @db.native.resume(@name)
    def paused? = @db.native.paused?(@name)

    # {"queue","pending","scheduled","processing","dead","oldest_pending_age_ms","paused"}
    def stats = Util.parse(@db.native.stats(@name))

    # Epoch ms when something here next needs a worker, nil when nothing is pending.
    def next_deadline = @db.native.next_deadline([@name])

    def dead_letters(after: 0, limit: 100) = @db.native.dead_list(@name, after, limit).map { |r| Job.new(self, r) }
    def requeue(job) = @db.native.dead_requeue(job.is_a?(Job) ? job.id : job)
    def purge(before: nil) = @db.native.dead_purge(@name, Util.instant_ms(before, "before", min: 1))

    # Waits until something is claimable (true) or +timeout+ seconds pass (false).
    def wait(timeout: nil) = Queue.wait_claimable(@db, [@name], timeout)

    # Yields claimed jobs as they come, waiting (without the GVL, or yielding to
    # other fibers under a Fiber scheduler) while there are none. A job the block
    # leaves unfinished is acked when the block returns; an exception retries it
    # (the core's backoff) with the error and propagates. A +break+ (or throw)
    # leaves the current job to the caller (ack it, or its lease lapses). Jobs of
    # a +batch+ not yet yielded when the loop ends are handed back (pending again,
    # no attempt consumed). +timeout+: stop after this many idle seconds. Without
    # a block, returns an Enumerator.
    def each_job(worker_id, visibility: DEFAULT_VISIBILITY, batch: 1, timeout: nil)
      # checked before the first claim (and by the Enumerator's creation): a bad
      # timeout would otherwise surface only once the queue runs dry
      Util.name!(worker_id, "worker_id")
      Util.ms(visibility, "visibility", nil_ok: false, min_ms: 1)
      Util.int!(batch, "batch (the claim count)")
      Util.ms(timeout, "timeout")
      return enum_for(:each_job, worker_id, visibility: visibility, batch: batch, timeout: timeout) unless block_given?

      loop do
        jobs = claim_batch(batch, worker_id, visibility: visibility)
        if jobs.empty?
          break unless wait(timeout: timeout)

          next
        end
        handed = 0
        begin
          jobs.each do |job|
            handed += 1
            begin
              yield job
            rescue Exception => e # rubocop:disable Lint/RescueException -- retry the job, re-raise
              job.retry(error: "#{e.class}: #{e.message}") unless job.finished?
              raise
            end
            job.ack unless job.finished?
          end
        ensure
          # left early (raise, break, throw): the batch's unrun jobs go back unrun
          jobs[handed..].each(&:hand_back) if handed < jobs.size && !@db.closed?
        end
      end
      nil
    end
    alias jobs each_job

    # ---- tasks ----
    # Calls task +task+ by name (any runtime's worker may run it): returns a TaskHandle.
    # Options: kwargs:, result_ttl: seconds, timeout: seconds (of the run), tx:, and the
    # job options of #enqueue.
    def call(task, *args, kwargs: {}, result_ttl: nil, timeout: nil, tx: nil, priority: nil, delay: nil,
             run_at: nil, max_attempts: nil, expires: nil, unique_key: nil, meta: nil)
      opts = enqueue_opts(priority, delay, run_at, max_attempts, expires, unique_key, meta)
      id = @db.handle(tx).task_enqueue(@name, Util.name!(task, "task name"), Util.dump(args, "args"),
                                       Util.dump(Util.hash!(kwargs, "kwargs"), "kwargs"), Util.ms(result_ttl, "result_ttl", positive: true),
                                       Util.ms(timeout, "timeout", positive: true), opts)
      TaskHandle.new(@db, id)
    end

    # @api private
    def self.wait_claimable(db, queues, timeout)
      deadline = timeout.nil? ? nil : db.now + Util.ms(timeout, "timeout")
      sub = db.own_sub
      unless Util.fiber_scheduler?
        return db.native.queue_wait(queues, deadline, sub.native)
      end

      io = Util.io_for(sub.fd)
      loop do
        sub.drain
        due = db.native.next_deadline(queues)
        now = db.now
        return true if due && due <= now
        return false if deadline && now >= deadline

        # sleep until the next commit, the next due instant or the deadline
        left = [due, deadline].compact.map { |t| (t - now) / 1000.0 }.min
        Util.wait_fd(io, left.nil? ? 1.0 : [left, 1.0].min)
      end
    end

    private

    # (+at+: where the options come from, in messages: "jobs[2] ")
    def enqueue_opts(priority, delay, run_at, max_attempts, expires, unique_key, meta, at = "")
      # nil is the core's default; an explicit 0 is not (the core reads 0 as "default")
      if !priority.nil? && !(priority.is_a?(Integer) && Util::INT64.cover?(priority))
        raise InvalidArgument, "#{at}priority must be a 64-bit Integer, not #{priority.is_a?(Integer) ? priority : Util.kind(priority)}"
      end
      if !max_attempts.nil? && !(max_attempts.is_a?(Integer) && max_attempts.between?(1, Native::MAX_ATTEMPTS))
        raise InvalidArgument, "#{at}max_attempts must be between 1 and #{Native::MAX_ATTEMPTS}, not #{max_attempts.is_a?(Integer) ? max_attempts : Util.kind(max_attempts)}"
      end

      # (the core's message names delay_ms and run_at_ms)
      raise InvalidArgument, "#{at.empty? ? "" : "#{at.strip}: "}give delay or run_at, not both" unless delay.nil? || run_at.nil?

      [priority, Util.ms(delay, "#{at}delay"), Util.instant_ms(run_at, "#{at}run_at", min: 1), max_attempts,
       Util.ms(expires, "#{at}expires", positive: true), Util.str!(unique_key, "#{at}unique_key", nil_ok: true), meta_json(meta, at)]
    end

    def meta_json(meta, at)
      return nil if meta.nil?
      raise InvalidArgument, "#{at}meta must be a Hash, not #{Util.kind(meta)}" unless meta.is_a?(Hash)

      Util.dump(meta, "#{at}meta")
    end

    def id_token(job, token)
      if job.is_a?(Job)
        raise InvalidArgument, "give a Job, or a job id and its token, not a Job and a token" unless token.nil?

        return [job.id, job.token]
      end
      raise InvalidArgument, "give a Job, or a job id and its token (the token is missing)" if token.nil?

      [job, token]
    end
  end
end
