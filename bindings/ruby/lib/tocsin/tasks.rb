# frozen_string_literal: true

module Tocsin
  # The task raised (or its job died): #type and #message as recorded by the
  # runtime that ran it (a Ruby, Python, Node or Go worker).
  class TaskError < Error
    attr_reader :type, :task_message, :job_id, :trace

    def initialize(type, message, job_id, trace = nil)
      super(message.to_s.empty? ? type.to_s : "#{type}: #{message}")
      @type = type
      @task_message = message
      @job_id = job_id
      @trace = trace
    end
  end

  # What calling a task returns: #value waits for its result.
  class TaskHandle
    attr_reader :db, :job_id

    def initialize(db, job_id)
      raise InvalidArgument, "db must be a Tocsin::Database, not #{Util.kind(db)}" unless db.is_a?(Database)

      @db = db
      @job_id = Util.int!(job_id, "job id")
    end

    def inspect = "#<Tocsin::TaskHandle job #{@job_id}>"

    # Waits (no GVL; yields under a Fiber scheduler) for the task's return value;
    # raises TaskError if it failed, Tocsin::Timeout after +timeout+ seconds.
    def value(timeout: nil) = unwrap(@db.wait_result(@job_id, timeout: timeout))
    alias get value

    def done? = !@db.result(@job_id).nil?

    # The Result when there is one (nil while it runs).
    def result = @db.result(@job_id)

    private

    def unwrap(r)
      raise TaskError.new(r.error_type || "Error", r.error_message || "", @job_id, r.error_trace) if r.error?

      r.value
    end
  end

  # A task registry: name -> callable, with the options the worker protocol takes.
  # Tocsin.task("send_email") { |to, subject:| ... } registers a block;
  # any object responding to #call (or a class with #perform) works too.
  class Task
    attr_reader :name, :callable, :queue, :retries, :backoff_ms, :timeout_ms, :result_ttl_ms

    def initialize(name, callable, queue: "default", retries: 2, backoff: nil, timeout: nil, result_ttl: nil)
      @name = Util.core_name!(name, "task name")
      raise InvalidArgument, "task #{@name}: give a block or a callable (an object with #call)" unless callable.respond_to?(:call)

      @callable = callable
      @queue = Util.core_name!(queue, "queue")
      unless retries.is_a?(Integer) && retries.between?(0, Native::MAX_ATTEMPTS - 1)
        raise InvalidArgument, "retries must be an Integer between 0 and #{Native::MAX_ATTEMPTS - 1}, not #{retries.inspect}"
      end

      @retries = retries
      @backoff_ms = Util.ms(backoff, "backoff", positive: true)
      @timeout_ms = Util.ms(timeout, "timeout", positive: true)
      @result_ttl_ms = Util.ms(result_ttl, "result_ttl", positive: true)
    end

    # @api private: the task runs jobs of any queue (the ActiveJob adapter's, on
    # every queue a job class names): a worker on a queue no task names does not
    # warn that its jobs will be handed back.
    def serves_any_queue!
      @any_queue = true
      self
    end

    def serves_any_queue? = @any_queue == true

    # Calls the task here and now (args and kwargs as a worker would pass them).
    def run(args, kwargs)
      kw = kwargs.transform_keys(&:to_sym)
      kw.empty? ? @callable.call(*args) : @callable.call(*args, **kw)
    end

    # Enqueues a call on the task's queue: a TaskHandle.
    def call_async(db, *args, kwargs: {}, **opts)
      raise InvalidArgument, "db must be a Tocsin::Database, not #{Util.kind(db)}" unless db.is_a?(Database)

      db.queue(@queue).call(@name, *args, kwargs: kwargs, max_attempts: @retries + 1,
                            result_ttl: @result_ttl_ms && @result_ttl_ms / 1000.0, **opts)
    end
  end

  @tasks = {}
  @periodic = []
  class << self
    # The tasks registered in this process, by name.
    attr_reader :tasks, :periodic

    # Registers a task: Tocsin.task("send_email", queue: "emails") { |to| ... }.
    # Options: queue:, retries: (attempts - 1), backoff: seconds (base of the
    # exponential backoff), timeout: seconds, result_ttl: seconds.
    def task(name, callable = nil, **opts, &block)
      fn = callable || block
      raise InvalidArgument, "give a block or a callable (an object with #call), not #{Util.kind(fn)}" unless fn.respond_to?(:call)

      t = Task.new(name, fn, **opts)
      @tasks[t.name] = t
    end

    # Registers a periodic task: a schedule "periodic:<name>" written when a worker
    # with the scheduler starts, whose boundaries enqueue a call of the task.
    # +cron+, the task's name, +args+ and +kwargs+ (JSON values) are checked now, not
    # when a worker starts (where a bad one would stop every worker of the process).
    def every(cron, task_name, args: [], kwargs: {})
      cron = Util.str!(cron, "cron")
      Native.cron_next(cron, Util.now_ms, false) # a bad expression names its field
      entry = { cron: cron, task: Util.core_name!(task_name, "task name"),
                args: Util.json!(Util.array!(args, "args"), "args"),
                kwargs: Util.json!(Util.hash!(kwargs, "kwargs"), "kwargs") }
      @periodic << entry
    end
  end
end
