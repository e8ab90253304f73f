# frozen_string_literal: true

# tocsin: NOTIFY/LISTEN, durable job queues and durable streams for SQLite.
#
#   Tocsin.open("app.db") do |db|
#     db.transaction { |tx| db.queue("emails").enqueue({ to: "ann@example.com" }, tx: tx) }
#     db.queue("emails").each_job("worker-1") { |job| deliver(job.payload) }
#   end
#
# All behaviour lives in the C core (compiled into tocsin/tocsin_native); this layer
# maps it to Ruby: keyword arguments, blocks, Enumerators, Tocsin::Error subclasses,
# JSON values. Durations are seconds (Numeric), instants are Time or epoch ms.
require "json"
require "timeout"
require "tocsin/tocsin_native"
require "tocsin/version"
require "tocsin/util"
require "tocsin/one_sqlite"
require "tocsin/database"
require "tocsin/queue"
require "tocsin/stream"
require "tocsin/coord"
require "tocsin/tasks"
require "tocsin/worker"

module Tocsin
  class << self
    # Opens (creating if needed) the database at +path+. With a block, yields the
    # database and closes it afterwards, returning the block's value.
    #
    # Options: busy_timeout: seconds a writer waits for the lock (default 5),
    # max_payload: bytes (default 1 MiB), read_only: true.
    # Refuses (Tocsin::Error) when a second copy of SQLite is loaded in the process
    # (see Tocsin::OneSQLite); check_sqlite: false skips that check.
    def open(path, **opts)
      db = Database.new(path, **opts)
      return db unless block_given?

      begin
        yield db
      ensure
        db.close
      end
    end

    # The tocsin library version and the SQLite version it runs on.
    def core_version = Native.version
    def sqlite_version = Native.sqlite_version

    # Path of the loadable SQLite extension built with this gem (entry point
    # sqlite3_tocsin_init): load it into the host's own SQLite connections.
    def loadable_path
      $LOAD_PATH.each do |dir|
        f = File.join(dir, "tocsin", "sqlite", "tocsin.so")
        return f if File.file?(f)
      end
      native = $LOADED_FEATURES.find { |f| f.end_with?("tocsin/tocsin_native.so") }
      if native
        f = File.join(File.dirname(native), "sqlite", "tocsin.so")
        return f if File.file?(f)
      end
      raise Error, "the tocsin SQLite extension (tocsin/sqlite/tocsin.so) is missing from this installation"
    end

    # The next fire time (epoch ms) of a cron expression after +after+ (Time or ms;
    # default now), nil if none before year 10000.
    def cron_next(expr, after: nil, local_time: false)
      Native.cron_next(Util.str!(expr, "cron"), after.nil? ? Util.now_ms : Util.instant_ms(after, "after"),
                       Util.bool!(local_time, "local_time"))
    end

    # The exponential backoff of the core (ms): min(cap, base * 2^(attempts-1)) jittered.
    def backoff_ms(attempts, base_ms: Native::BACKOFF_BASE_MS, cap_ms: Native::BACKOFF_CAP_MS)
      Native.backoff_ms(base_ms, cap_ms, attempts)
    end
  end
end

# ActiveJob::QueueAdapters::TocsinAdapter, only when ActiveJob is loaded (else require
# "tocsin/active_job_adapter" after it).
require "tocsin/active_job_adapter" if defined?(::ActiveJob::Base)
