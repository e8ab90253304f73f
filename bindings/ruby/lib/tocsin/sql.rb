# frozen_string_literal: true

require "tocsin"

module Tocsin
  # Your transaction, your driver: the tocsin SQL functions (docs/sql.md) in the
  # application's own sqlite3-gem (or ActiveRecord) connection, so a job, an event
  # or a notification commits or rolls back with the application's own writes.
  #
  #   require "sqlite3"
  #   require "tocsin/sql"
  #   conn = SQLite3::Database.new("app.db")
  #   Tocsin::SQL.load(conn)
  #   conn.transaction do
  #     conn.execute("INSERT INTO orders(total) VALUES (990)")
  #     Tocsin::SQL.enqueue(conn, "emails", { order: 1 }, priority: 5)
  #   end
  #
  # The extension runs on the SQLite of the connection that loads it, whichever
  # copy that is: loading makes no second-copy check (Tocsin.open, which opens the
  # file with tocsin's own copy, does: Tocsin::OneSQLite).
  #
  # Errors are Tocsin::Error subclasses, as through Tocsin.open: a refusal of the
  # SQL functions (an empty queue name, a payload over the limit) is the class of
  # the same refusal there (InvalidArgument, TooBig, ReadOnly, Busy, ...), a
  # closed connection Tocsin::Closed; the driver's exception is the #cause and
  # its code the #sqlite_code.
  module SQL
    module_function

    # Loads the tocsin extension into +conn+ (a SQLite3::Database, or an
    # ActiveRecord connection: its raw_connection is used).
    def load(conn)
      raw = raw(conn)
      unless raw.respond_to?(:enable_load_extension)
        raise Error, "this sqlite3 gem cannot load SQLite extensions (no enable_load_extension)"
      end

      driver(raw, Error, "cannot load the tocsin extension into the connection: ") do
        raw.enable_load_extension(true)
        begin
          raw.load_extension(Tocsin.loadable_path)
        ensure
          raw.enable_load_extension(false)
        end
      end
      conn
    end

    # SELECT tocsin_enqueue(queue, payload, options): the job id. Options as
    # Queue#enqueue (delay/expires in seconds, run_at a Time or ms).
    def enqueue(conn, queue, payload, priority: nil, delay: nil, run_at: nil, max_attempts: nil, expires: nil,
                unique_key: nil, meta: nil)
      o = options(priority, delay, run_at, max_attempts, expires, unique_key, meta)
      value(conn, "SELECT tocsin_enqueue(?, ?, ?)", Util.name!(queue, "queue"), Util.dump(payload),
            o.empty? ? nil : Util.dump(o, "options"))
    end

    # SELECT tocsin_task_enqueue(...): a call of +task+ (any runtime's, by name) with
    # +args+ and +kwargs:+, as Queue#call makes it (result_ttl:/timeout: seconds, the
    # job options of enqueue); the job id, whose result Database#wait_result reads.
    def call(conn, queue, task, *args, kwargs: {}, result_ttl: nil, timeout: nil, priority: nil, delay: nil,
             run_at: nil, max_attempts: nil, expires: nil, unique_key: nil, meta: nil)
      o = options(priority, delay, run_at, max_attempts, expires, unique_key, meta)
      ttl = Util.ms(result_ttl, "result_ttl", positive: true)
      limit = Util.ms(timeout, "timeout", positive: true)
      o[:result_ttl_ms] = ttl if ttl&.positive?
      o[:timeout_ms] = limit if limit&.positive?
      value(conn, "SELECT tocsin_task_enqueue(?, ?, ?, ?, ?)", Util.name!(queue, "queue"), Util.name!(task, "task name"),
            Util.dump(args, "args"), Util.dump(Util.hash!(kwargs, "kwargs"), "kwargs"),
            o.empty? ? nil : Util.dump(o, "options"))
    end

    def options(priority, delay, run_at, max_attempts, expires, unique_key, meta)
      o = {}
      o[:priority] = Util.int!(priority, "priority") unless priority.nil?
      raise InvalidArgument, "give delay or run_at, not both" unless delay.nil? || run_at.nil?

      o[:delay_ms] = Util.ms(delay, "delay") unless delay.nil?
      o[:run_at_ms] = Util.instant_ms(run_at, "run_at", min: 1) unless run_at.nil?
      o[:max_attempts] = Util.int!(max_attempts, "max_attempts") unless max_attempts.nil?
      o[:expires_ms] = Util.ms(expires, "expires", positive: true) unless expires.nil?
      o[:unique_key] = Util.str!(unique_key, "unique_key") unless unique_key.nil?
      o[:meta] = Util.json!(Util.hash!(meta, "meta"), "meta") unless meta.nil?
      o
    end

    # Enqueues a task call (+envelope+ from Database#task_envelope, or any
    # runtime's envelope JSON text) on +queue+.
    def enqueue_envelope(conn, queue, envelope)
      value(conn, "SELECT tocsin_enqueue(?, ?)", Util.name!(queue, "queue"), Util.str!(envelope, "envelope"))
    end

    def notify(conn, channel, payload, meta: nil)
      value(conn, "SELECT tocsin_notify(?, ?, ?)", Util.name!(channel, "channel"), Util.dump(payload), Util.meta(meta))
    end

    def publish(conn, topic, payload, key: nil, meta: nil)
      value(conn, "SELECT tocsin_stream_publish(?, ?, ?, ?)", Util.name!(topic, "topic"), Util.dump(payload),
            Util.str!(key, "key", nil_ok: true), Util.meta(meta))
    end

    def raw(conn)
      raw = conn.respond_to?(:raw_connection) ? conn.raw_connection : conn
      unless raw.respond_to?(:get_first_value)
        raise InvalidArgument, "conn must be a SQLite3::Database (or an ActiveRecord connection), not #{Util.kind(conn)}"
      end

      raw
    end

    def value(conn, sql, *binds)
      raw = raw(conn)
      driver(raw, InvalidArgument) { raw.get_first_value(sql, binds) }
    end

    # Runs the block on the driver's connection +raw+; its exceptions become the
    # Tocsin::Error of the same failure (+default+ for a code of no other class).
    def driver(raw, default, prefix = "")
      closed!(raw)
      yield
    rescue Error
      raise
    rescue StandardError => e
      # (the sqlite3 gem: "ArgumentError: prepare called on a closed database")
      closed!(raw, e)
      raise unless defined?(::SQLite3::Exception) && e.is_a?(::SQLite3::Exception)

      code = e.respond_to?(:code) ? e.code.to_i : 0
      msg = "#{prefix}#{e.message}"
      msg += " (load the tocsin functions into this connection first: Tocsin::SQL.load(conn))" if msg.include?("no such function: tocsin_")
      # the class of the same failure through the native calls, as the core maps
      # SQLite's codes (anything else, such as SQLITE_ERROR, the SQL functions'
      # refusal of an argument: the default)
      err = (Native.error_class_of_sqlite(code) || default).new(msg)
      err.instance_variable_set(:@sqlite_code, code)
      raise err # (e is its #cause)
    end

    def closed!(raw, cause = nil)
      return unless raw.respond_to?(:closed?) && raw.closed?

      raise Closed, "the connection is closed (#{Util.kind(raw)}#{cause && ": #{cause.message}"})"
    end
  end

  class Database
    # The JSON envelope of a call of +task+ (the core's tocsin_task_envelope), for
    # enqueueing it through another driver (Tocsin::SQL.enqueue_envelope).
    def task_envelope(task, *args, kwargs: {}, result_ttl: nil, timeout: nil)
      native.task_envelope(Util.name!(task, "task name"), Util.dump(args, "args"),
                           Util.dump(Util.hash!(kwargs, "kwargs"), "kwargs"),
                           Util.ms(result_ttl, "result_ttl", positive: true), Util.ms(timeout, "timeout", positive: true))
    end
  end
end
