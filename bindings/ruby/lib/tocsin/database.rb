# frozen_string_literal: true

module Tocsin
  # A transaction on a connection of its own (tocsin_tx_begin): only calls given
  # +tx:+ join it. Made by Database#transaction.
  class Transaction
    attr_reader :database

    def initialize(db, native)
      @database = db
      @native = native
    end

    # @api private
    def native
      raise Closed, "the transaction has ended" if @native.closed?

      @native
    end

    def active? = !@native.closed?

    # Runs SQL of the application's (no result rows) inside the transaction.
    def execute(sql)
      native.exec(Util.str!(sql, "sql"))
      nil
    end

    def commit = @native.tx_commit
    def rollback = @native.tx_rollback

    # Shortcuts: tx.enqueue("emails", payload) == db.queue("emails").enqueue(payload, tx: tx)
    def enqueue(queue, payload = nil, **opts) = @database.queue(queue).enqueue(payload, tx: self, **opts)
    def publish(topic, payload, **opts) = @database.stream(topic).publish(payload, tx: self, **opts)
    def notify(channel, payload = nil, **opts) = @database.notify(channel, payload, tx: self, **opts)

    def inspect = "#<Tocsin::Transaction #{active? ? "active" : "ended"}>"
  end

  # A stored result (Database#result, #wait_result).
  Result = Struct.new(:job_id, :error, :value, :error_type, :error_message, :created_at, :expires_at,
                      :error_trace) do
    def error? = error
    def self.from(row)
      return nil if row.nil?

      r = new(*row)
      r.value = Util.parse(r.value) unless r.error
      r
    end
  end

  # An open database (Tocsin.open). Usable from any number of threads at once.
  class Database
    attr_reader :path

    def initialize(path, busy_timeout: 5, max_payload: nil, read_only: false, check_sqlite: true)
      @path = Util.text(Util.path!(path), "path")
      busy_ms = Util.ms(busy_timeout, "busy_timeout", nil_ok: false, max_ms: 2**31 - 1, positive: true) # a C int of ms
      Util.payload_limit!(max_payload, "max_payload", nil_ok: true)
      Util.bool!(read_only, "read_only")
      OneSQLite.check! if Util.bool!(check_sqlite, "check_sqlite")
      @native = Native::DB.open(@path, busy_ms, max_payload, read_only)
      @workers = []
      @workers_lock = Mutex.new
      @subs = [] # the threads' own wake subscriptions (#own_sub)
      # listeners, stream subscriptions and subscriptions: #close ends them
      @sources = ObjectSpace::WeakMap.new
      @closing = false # #close has begun: what registers from then on closes itself
      @pid = Process.pid # (a child of fork() inherits the parent's workers: not its to stop)
      @tx_key = :"tocsin_tx_#{object_id}" # (fiber-local) a #transaction block of this database runs
    end

    # @api private: a Listener / StreamSubscription / Subscription made on this
    # database (#close closes it). One opened while #close runs in another thread
    # -- after #close took its list -- is closed here (Tocsin::Closed): else it
    # would outlive the database, and a wait on it would never end.
    def track(source)
      registered = @workers_lock.synchronize { @sources[source] = true unless @closing }
      return source if registered

      begin
        source.close
      rescue Error
        nil
      end
      raise Closed, "the database is closed"
    end

    # @api private: the native handle of +tx+ (checked to belong here) or ours.
    def handle(tx = nil)
      return native if tx.nil?
      raise InvalidArgument, "tx: must be a Tocsin::Transaction, not #{Util.kind(tx)}" unless tx.is_a?(Transaction)
      raise InvalidArgument, "tx: belongs to another database" unless tx.database.equal?(self)

      tx.native
    end

    # @api private
    def native
      raise Closed, "the database is closed" if @native.closed?

      @native
    end

    # Closes the database; workers running on it are stopped first (each closes,
    # handing back what it still runs, and its #run raises Tocsin::Closed) -- a
    # worker needs its database to the end.
    # Calls other threads are running finish first; their waits (queue, result,
    # lock) end with Tocsin::Closed. Listeners, stream subscriptions and
    # subscriptions (#subscribe) made from it are closed too (a stream
    # subscription saves its offset as its own #close does); a thread waiting on
    # one gets Tocsin::Closed. What another thread opens on it (a listener, a
    # worker's run ...) while this runs raises Tocsin::Closed. From a signal trap
    # (where Ruby allows no Mutex) the close runs in a thread of its own and
    # returns when it has finished -- or at once when the trap interrupted this
    # database's own bookkeeping, which the close then waits for.
    def close
      return close_from_trap if in_trap?

      sources = @workers_lock.synchronize do
        @closing = true # before the lists are taken: what registers later ends itself
        @sources.keys
      end
      sources.each do |s|
        s.close
      rescue Error
        nil # (a subscription's final offset save): the close goes on
      end
      workers = @workers_lock.synchronize { @workers.dup }
      # in a child of fork() they are the parent's, run by threads that are not here
      workers = [] unless Process.pid == @pid
      workers.each(&:stop_for_close) # (their #run raises Tocsin::Closed)
      workers.each { |w| w.wait_stopped unless w.loop_thread == Thread.current }
      @native.close { @workers_lock.synchronize { @subs.dup }.each { |s| s.native.wake unless s.closed? } }
      @workers_lock.synchronize { @subs.slice!(0..) }.each(&:close)
      nil
    end

    # Whether this runs in a signal trap: Mutex#synchronize raises ThreadError there.
    private def in_trap?
      Mutex.new.synchronize { false }
    rescue ThreadError
      true
    end

    private def close_from_trap
      t = Thread.new { close }
      t.report_on_exception = false
      # the trapped thread holding the database's lock would wait for the trap to end
      t.join unless @workers_lock.owned?
      nil
    end

    # @api private: Worker#run registers itself while it runs (before it opens its
    # native worker: #close stops it, or -- begun already -- refuses it).
    def worker_started(w)
      @workers_lock.synchronize do
        raise Closed, "the database is closed" if @closing

        @workers << w
      end
    end
    def worker_stopped(w) = @workers_lock.synchronize { @workers.delete(w) }
    def closed? = @native.closed?
    def inspect = "#<Tocsin::Database #{@path}#{closed? ? " (closed)" : ""}>"

    # Runs the block in a write transaction (BEGIN IMMEDIATE) and commits when it
    # returns; an exception (or break/throw out of the block) rolls everything back
    # (jobs, events and notifications with the application's own writes) and
    # propagates. Returns the block's value. Without a block, returns the
    # Transaction (commit or rollback it yourself).
    def transaction
      return Transaction.new(self, begin_tx) unless block_given?

      # (the inner one waited busy_timeout for the write lock the outer one holds, then raised Busy)
      if Thread.current[@tx_key]
        raise InvalidArgument, "db.transaction inside a db.transaction block of the same database: the inner one " \
                               "would wait for the write lock the outer one holds; pass the outer tx (tx:) instead"
      end

      # An interrupt (Thread#raise, Thread#kill, Timeout) waits until the ensure
      # holds the transaction, and during its commit or rollback: one that came
      # in between left it open -- the write lock held until GC.
      Thread.handle_interrupt(Object => :never) do
        tx = Transaction.new(self, begin_tx)
        done = false
        Thread.current[@tx_key] = true
        begin
          result = Thread.handle_interrupt(Object => :immediate) { yield tx }
          done = true
          result
        rescue Busy => e
          # the likeliest cause: a call on this database without tx:, which waited for
          # the write lock this very transaction holds
          raise e.exception("#{e.message} -- inside db.transaction, whose transaction holds the write lock: " \
                            "a call on this database without tx: waits for it (pass tx: tx)")
        ensure
          Thread.current[@tx_key] = nil
          # an exception, break, throw or return out of the block rolls back
          if tx.active?
            done ? tx.commit : tx.rollback
          end
        end
      end
    end

    # tocsin_tx_begin, which waits up to busy_timeout for the write lock. Under a
    # Fiber scheduler that wait would block the thread, and with it every fiber of
    # it -- the one holding the lock (another fiber's db.transaction) among them, so
    # the wait could only end in Busy: the BEGIN runs on a thread of its own while
    # this fiber yields (Thread#value). A fiber stopped meanwhile (Async's stop, a
    # timeout) fires the BEGIN's cancel token: its wait ends at once, nothing begun
    # (what it began just before is rolled back).
    def begin_tx
      n = native
      return n.tx_begin unless Util.fiber_scheduler?

      cancel = Native::Cancel.new
      th = Thread.new { n.tx_begin(cancel) }
      th.report_on_exception = false
      begin
        th.value
      rescue Exception # rubocop:disable Lint/RescueException
        # the BEGIN still waiting for the lock ends now (Interrupted, nothing begun);
        # one that got it meanwhile is rolled back by the reaper
        cancel.fire
        # (also when the BEGIN itself failed: th.value raises again in the reaper)
        Thread.new do
          th.value.tx_rollback
        rescue Exception # rubocop:disable Lint/RescueException
          nil
        end
        raise
      end
    end
    private :begin_tx

    # SQL of the application's (no result rows), on the database's connection.
    def execute(sql) = native.exec(Util.str!(sql, "sql"))

    # The handle's clock (epoch ms); set_time(Time/ms) fixes it (tests), nil restores it.
    def now = native.now
    def set_time(t) = native.set_time(Util.instant_ms(t))
    def max_payload=(bytes)
      native.set_max_payload(Util.payload_limit!(bytes, "max_payload"))
    end

    def queue(name) = Queue.new(self, Util.name!(name, "queue name"))
    def stream(topic) = Stream.new(self, Util.name!(topic, "topic"))

    # Statistics of every queue: an Array of Hashes (see Queue#stats).
    def stats
      Util.parse(native.stats(nil))["queues"]
    end

    # ---- notify / listen ----
    def notify(channel, payload = nil, tx: nil, meta: nil)
      handle(tx).notify(Util.name!(channel, "channel"), Util.dump(payload), Util.meta(meta))
    end

    def notifications(channel, after: 0, limit: 100)
      native.notify_read(Util.name!(channel, "channel"), after, limit).map { |r| Notification.new(*r) }
    end

    def notify_max_id = native.notify_max_id

    # Listens on +channel+ from now on. With a block, yields each notification until
    # the block breaks (or +timeout+ seconds pass without one), closing the listener
    # afterwards; without, returns the Listener.
    def listen(channel, buffer_size: 1000, timeout: nil, &block)
      Util.ms(timeout, "timeout")
      l = Listener.new(self, Util.name!(channel, "channel"), buffer_size)
      return l unless block

      begin
        l.each(timeout: timeout, &block)
      ensure
        l.close
      end
    end

    # A raw wake subscription (commits of any process on this file); #close closes it.
    def subscribe = Subscription.new(self)

    # ---- results ----
    def save_result(job_id, value, ttl: nil, tx: nil)
      handle(tx).result_save(job_id, Util.dump(value, "result"), Util.ms(ttl, "ttl", positive: true))
    end

    def save_error(job_id, type, message = "", ttl: nil, tx: nil)
      handle(tx).result_save_error(job_id, Util.str!(type, "type"), Util.str!(message, "message", nil_ok: true),
                                   Util.ms(ttl, "ttl", positive: true))
    end

    def result(job_id, tx: nil) = Result.from(handle(tx).result_get(job_id))
    def delete_result(job_id) = native.result_delete(job_id)

    # Waits (the GVL released, or yielding under a Fiber scheduler) for the outcome
    # of +job_id+: a Result (a job that died without one gives error_type "JobDead").
    # Raises Tocsin::Timeout after +timeout+ seconds.
    def wait_result(job_id, timeout: nil)
      Util.int!(job_id, "job id")
      deadline = timeout.nil? ? nil : now + Util.ms(timeout, "timeout")
      sub = own_sub
      if Util.fiber_scheduler?
        io = Util.io_for(sub.fd)
        loop do
          r = native.result_check(job_id)
          return Result.from(r) if r

          left = deadline && (deadline - now) / 1000.0
          # at the deadline, the core's last check: its Timeout says why
          return result_wait_until(job_id, 0, sub, timeout) if left && left <= 0

          Util.wait_fd(io, left)
          sub.drain
        end
      end
      result_wait_until(job_id, deadline, sub, timeout)
    end

    # ---- locks, rate limits ----
    def lock(name, ttl: 30, owner: nil) = Lock.new(self, Util.name!(name, "lock name"), ttl, owner)

    # Holds lock +name+ while the block runs (waiting for it up to +timeout+ seconds;
    # Tocsin::Timeout after), then releases it. Yields the Lock (its #token fences).
    def with_lock(name, ttl: 30, timeout: nil, owner: nil)
      raise InvalidArgument, "with_lock takes a block" unless block_given?

      l = lock(name, ttl: ttl, owner: owner)
      raise Timeout, "lock #{name} not acquired within the timeout" unless l.acquire(timeout: timeout)

      begin
        yield l
      ensure
        l.release
      end
    end

    # [owner or nil, token, until_ms]
    def lock_holder(name) = native.lock_holder(Util.name!(name, "lock name"))
    def rate_limit(name, limit:, per:) = RateLimit.new(self, Util.name!(name, "rate limit name"), limit, per)

    # ---- schedules ----
    # Registers schedule +name+: every boundary of +cron+ enqueues +payload+ on +queue+.
    # Returns the next fire time (epoch ms).
    def schedule(name, cron, queue:, payload: nil, **opts)
      native.schedule_set(Util.name!(name, "schedule name"), Util.str!(cron, "cron"), Util.name!(queue, "queue"),
                          Util.dump(payload), Schedule.opts(opts))
    end

    def update_schedule(name, cron: nil, queue: nil, payload: Schedule::KEEP, **opts)
      p = payload.equal?(Schedule::KEEP) ? nil : Util.dump(payload)
      native.schedule_update(Util.name!(name, "schedule name"), Util.str!(cron, "cron", nil_ok: true),
                             queue.nil? ? nil : Util.name!(queue, "queue"), p, opts.empty? ? nil : Schedule.opts(opts))
    end

    def schedules = native.schedule_list.map { |h| Schedule.from(h) }
    def get_schedule(name) = Schedule.from(native.schedule_get(Util.name!(name, "schedule name")))
    def pause_schedule(name) = native.schedule_pause(Util.name!(name, "schedule name"))
    def resume_schedule(name) = native.schedule_resume(Util.name!(name, "schedule name"))
    def unschedule(name) = native.schedule_remove(Util.name!(name, "schedule name"))
    def scheduler_tick = native.scheduler_tick
    def scheduler_next_fire = native.scheduler_next_fire

    # ---- housekeeping ----
    # Deletes what has expired: notifications older than +notifications_max_age+
    # seconds (and beyond +notifications_keep+ per channel), expired results, old
    # rate-limit admissions and, with +dead_before+ (Time/ms), dead letters.
    # Returns the counts.
    # (The core reads a 0 of either notification criterion as "no criterion": an
    # explicit 0 -- "keep none", "older than now" -- is refused, not read as "prune
    # nothing"; leave the option out for that.)
    def prune(notifications_max_age: nil, notifications_keep: nil, dead_before: nil)
      out = {}
      age_ms = Util.ms(notifications_max_age, "notifications_max_age", positive: true)
      keep!(notifications_keep, "notifications_keep")
      dead_ms = Util.instant_ms(dead_before, "dead_before", min: 1)
      out[:notifications] = native.notify_prune(age_ms, notifications_keep) if !age_ms.nil? || !notifications_keep.nil?
      out[:results] = native.result_sweep
      out[:rate_limits] = native.ratelimit_sweep
      out[:dead] = native.dead_purge(nil, dead_ms) unless dead_ms.nil?
      out
    end

    def set_notify_autotrim(max_age: nil, max_keep: nil, one_in: 100)
      age = Util.ms(max_age, "max_age", positive: true)
      keep!(max_keep, "max_keep")
      # (the core's message names max_age_ms)
      if one_in.is_a?(Integer) && one_in.positive? && (age.nil? || age.zero?) && (max_keep.nil? || max_keep == 0)
        raise InvalidArgument, "set_notify_autotrim needs max_age: or max_keep: (one_in: 0 turns it off)"
      end

      native.notify_autotrim(age, max_keep, one_in)
    end

    # A notifications count to keep: nil (no such criterion), else an Integer >= 1.
    private def keep!(v, what)
      return if v.nil?

      Util.int!(v, what)
      raise InvalidArgument, "#{what} must be >= 1, not #{Util.shown(v)} (leave it out for no limit)" unless v >= 1
    end

    # Calls task +task+ (registered by a worker of any runtime) on +queue+ with
    # positional +args+ and keyword +kwargs+; returns a TaskHandle (#value waits).
    def call(task, *args, queue: "default", kwargs: {}, **opts)
      Util.name!(task, "task name")
      self.queue(queue).call(task, *args, kwargs: kwargs, **opts)
    end

    # The core's result wait; its Timeout (the job never claimed, running or retrying)
    # names the job and the timeout.
    private def result_wait_until(job_id, deadline, sub, timeout)
      Result.from(native.result_wait(job_id, deadline, sub.native))
    rescue Timeout => e
      raise Timeout, "no result for job #{job_id} within #{timeout} s: #{e.message}"
    end

    # @api private: the database's own wake subscription (waits poke it to cancel).
    # One per thread: a poke must end only that thread's wait.
    def own_sub
      key = :"tocsin_sub_#{object_id}"
      s = Thread.current.thread_variable_get(key)
      if s.nil? || s.closed?
        s = Subscription.new(self, track: false)
        registered = @workers_lock.synchronize do
          @subs.reject!(&:closed?)
          @subs << s unless @closing
        end
        unless registered # #close began in another thread after the open: it would not close this one
          s.close
          raise Closed, "the database is closed"
        end
        Thread.current.thread_variable_set(key, s)
      end
      s
    end
  end

  # A raw wake: "something committed, re-read". #wait(timeout), #to_io for selects.
  class Subscription
    attr_reader :native

    # (+track+: Database#close closes it; the database's own per-thread
    # subscriptions are closed apart, once its calls have ended)
    def initialize(db, track: true)
      @native = Native::Sub.open(db.native)
      @closed = false
      db.track(self) if track
    end

    def fd = @native.fd
    def to_io = (@io ||= Util.io_for(fd))
    def drain = @native.drain
    def poke = @native.poke

    # true when woken, false at the timeout (seconds; nil: none).
    def wait(timeout = nil)
      ms = Util.ms(timeout, "timeout")
      if Util.fiber_scheduler?
        deadline = timeout && Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
        loop do
          return true if drain # (Tocsin::Closed once closed)

          left = deadline && deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          return false if left && left <= 0

          Util.wait_fd(to_io, left)
        end
      end
      @native.wait(ms)
    end

    def closed? = @closed

    def close
      @closed = true
      @native.close
    end
  end
end
