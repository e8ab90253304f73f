# frozen_string_literal: true

module Tocsin
  # A named TTL lease with a fencing token (Database#lock, #with_lock).
  class Lock
    attr_reader :name, :owner, :token, :until_ms

    def initialize(db, name, ttl, owner)
      @db = db
      @name = name
      @ttl_ms = Util.lease_ms(ttl, "ttl")
      @owner = owner.nil? ? Util.default_owner : Util.name!(owner, "owner")
      @token = 0
    end

    def held? = @token.positive?

    # Acquires without waiting: true when held.
    def try_acquire
      tok, @until_ms = @db.native.lock_acquire(@name, @owner, @ttl_ms)
      @token = tok
      tok.positive?
    end

    # Waits (tocsin_lock_wait: no GVL, only reads while another owner holds it) up
    # to +timeout+ seconds (nil: no bound). True when held, false at the timeout.
    def acquire(timeout: nil)
      deadline = timeout.nil? ? nil : @db.now + Util.ms(timeout, "timeout")
      sub = @db.own_sub
      if Util.fiber_scheduler?
        io = Util.io_for(sub.fd)
        loop do
          sub.drain
          return true if try_acquire

          now = @db.now
          return false if deadline && now >= deadline

          _, _, lease_end = @db.native.lock_holder(@name)
          left = [lease_end.positive? ? lease_end : nil, deadline].compact.map { |t| (t - now) / 1000.0 }.min
          Util.wait_fd(io, [left || 1.0, 1.0].min)
        end
      end
      r = @db.native.lock_wait(@name, @owner, @ttl_ms, deadline, sub.native)
      return false if r.nil?

      @token, @until_ms = r
      true
    end

    # Extends the lease (true), or false when it was taken over (fencing).
    def renew(ttl: nil)
      ttl_ms = ttl.nil? ? @ttl_ms : Util.lease_ms(ttl, "ttl")
      raise InvalidArgument, "the lock is not held" unless held?

      @db.native.lock_renew(@name, @owner, @token, ttl_ms)
    end

    def release
      return false unless held?

      ok = @db.native.lock_release(@name, @owner, @token)
      @token = 0
      ok
    end
  end

  # A sliding-log rate limit (Database#rate_limit): #try -> Decision.
  class RateLimit
    Decision = Struct.new(:allowed, :retry_after_ms, :remaining) do
      def allowed? = allowed
      def retry_after = retry_after_ms / 1000.0
    end

    def initialize(db, name, limit, per)
      @db = db
      @name = name
      @limit = Util.int!(limit, "limit")
      @per_ms = Util.lease_ms(per, "per")
    end

    def try = Decision.new(*@db.native.ratelimit_try(@name, @limit, @per_ms))
    def reset = @db.native.ratelimit_reset(@name)
  end

  # A cron schedule as stored.
  class Schedule
    KEEP = Object.new.freeze
    FIELDS = %i[name cron queue payload meta priority max_attempts job_expires_ms catch_up max_catch_up
                local_time paused next_fire last_fire last_job_id fired_count skipped_count created_at
                updated_at].freeze
    attr_reader(*FIELDS)

    def self.from(h)
      return nil if h.nil?

      s = new
      h.each { |k, v| s.instance_variable_set(:"@#{k}", v) }
      s
    end

    def payload_value = Util.parse(@payload)
    def paused? = @paused
    def to_h = FIELDS.to_h { |f| [f, public_send(f)] }

    CATCH_UP = { once: 0, all: 1 }.freeze

    # keyword options -> the native options hash (only the keys given are set)
    def self.opts(o)
      bad = o.keys - %i[priority max_attempts job_expires catch_up max_catch_up local_time meta]
      raise InvalidArgument, "unknown schedule option(s): #{bad.join(", ")}" unless bad.empty?

      h = {}
      h[:priority] = Util.int!(o[:priority], "priority", nil_ok: true) if o.key?(:priority)
      h[:max_attempts] = Util.count!(o[:max_attempts], "max_attempts", Native::MAX_ATTEMPTS) if o.key?(:max_attempts)
      h[:job_expires_ms] = Util.ms(o[:job_expires], "job_expires", positive: true) if o.key?(:job_expires)
      if o.key?(:catch_up)
        h[:catch_up] = CATCH_UP.fetch(o[:catch_up]) do
          raise InvalidArgument, "catch_up must be :once or :all, not #{Util.kind(o[:catch_up])}"
        end
      end
      h[:max_catch_up] = Util.count!(o[:max_catch_up], "max_catch_up", Native::MAX_CATCH_UP) if o.key?(:max_catch_up)
      h[:local_time] = Util.bool!(o[:local_time], "local_time") if o.key?(:local_time)
      h[:meta] = Util.meta(o[:meta]) if o.key?(:meta)
      h
    end
  end
end
