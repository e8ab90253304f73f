# frozen_string_literal: true

module Tocsin
  # The base of every tocsin error; #code is the core's result code (TOCSIN_*),
  # #sqlite_code SQLite's extended code when SQLite failed (else 0).
  class Error
    def code = @code || self.class::CODE
    def sqlite_code = @sqlite_code || 0
  end

  # Type translation shared by the Ruby layer: durations, instants, JSON.
  module Util
    module_function

    INT64 = (-2**63..2**63 - 1).freeze

    # The core's bound of every time and duration (TOCSIN_MAX_TIME_MS, 9999-12-31T23:59:59.999Z).
    MAX_MS = Native::MAX_TIME_MS
    # The core's bound of a lock's ttl and a rate limit's window (TOCSIN_MAX_LEASE_MS, 366 days).
    LEASE_MAX_MS = Native::MAX_LEASE_MS
    MAX_TIME_TEXT = Time.at(Rational(MAX_MS, 1000)).utc.strftime("%Y-%m-%d %H:%M:%S.%L UTC").freeze

    # seconds (Numeric) -> ms; nil stays nil. The ranges are checked here, in seconds
    # and naming +what+ (the core's messages name its C argument, delay_ms, in ms):
    # +min_ms+/+max_ms+ are the core's bounds for the argument (+note+ says what
    # max_ms is, if not the core's bound of all). A value beyond them, NaN or an
    # infinity never reaches the core.
    # positive: 0 is refused (the core reads a 0 ms of it as "none" or "the
    # default"), and so for any value from min_ms 1 up, a fraction of a millisecond
    # above 0 is 1 ms, never 0 (as in Python).
    def ms(seconds, what = "duration", nil_ok: true, min_ms: 0, max_ms: MAX_MS, note: nil, positive: false)
      if seconds.nil?
        return nil if nil_ok

        raise InvalidArgument, "#{what} must be a number of seconds, not nil"
      end
      unless seconds.is_a?(Numeric) && seconds.real?
        raise InvalidArgument, "#{what} must be a number of seconds, not #{kind(seconds)}"
      end
      # (a Numeric of the application's may lack what a number of seconds needs;
      # an Integer is exact at any size)
      f = seconds.is_a?(Integer) ? seconds : number_op(seconds, what) { Float(seconds) }
      raise InvalidArgument, "#{what} must be a finite number of seconds, not #{seconds}" if f.is_a?(Float) && (f.nan? || f.infinite?)
      # no duration is negative: the core reads some negative values as "none" or
      # "the backoff", which a caller spells by leaving the option out
      if f.negative?
        raise InvalidArgument, "#{what} must be #{positive || min_ms >= 1 ? '> 0' : '>= 0'} seconds, not #{shown(seconds)}"
      end
      raise InvalidArgument, "#{what} must be > 0 seconds, not #{shown(seconds)} (leave it out for none)" if positive && f.zero?

      # (the words of the native layer's own range checks, busy_timeout's)
      out = lambda do
        raise InvalidArgument, "#{what} must be between #{seconds_text(min_ms)} and #{seconds_text(max_ms)} seconds" \
                               "#{note && " (#{note})"}, not #{shown(seconds)} seconds"
      end
      out.call if f * 1000 > max_ms
      v = number_op(seconds, what) { (seconds * 1000).round }
      v = 1 if v.zero? && f.positive? && (positive || min_ms >= 1)
      out.call unless v.is_a?(Integer) && v.between?(min_ms, max_ms)

      v
    end

    # A lock's ttl or a rate limit's window: seconds -> ms, 1 ms to 366 days.
    def lease_ms(seconds, what, nil_ok: false, min_ms: 1)
      ms(seconds, what, nil_ok: nil_ok, min_ms: min_ms, max_ms: LEASE_MAX_MS, note: "366 days")
    end

    # 253402300799.999, 31622400, 0.003: ms as seconds, for messages
    def seconds_text(ms)
      s, frac = ms.divmod(1000)
      frac.zero? ? s.to_s : format("%d.%03d", s, frac).sub(/0+\z/, "")
    end

    # A number as the caller wrote it, for messages (not 400 digits of it).
    def shown(v)
      t = v.to_s
      return t unless v.is_a?(Integer) && t.length > 24

      d = t.delete_prefix("-")
      "#{v.negative? ? "-" : ""}#{d[0]}.#{d[1, 3]}e+#{d.length - 1}"
    end

    def number_op(seconds, what)
      yield
    rescue StandardError => e
      raise InvalidArgument, "#{what} must be a number of seconds: #{kind(seconds)} cannot be used as one (#{e.class})"
    end

    # Time / epoch ms (Integer) -> ms, from +min+ to the core's bound (checked here:
    # the core's message names its C argument). +min+ is 1 where the core reads 0 as
    # "none" (a job's run_at, a purge's before: 0 would run now, or purge every dead
    # letter), as Python and Node refuse it; 0 (the epoch) elsewhere.
    def instant_ms(t, what = "instant", min: 0)
      case t
      when nil then nil
      when Time
        v = (t.to_r * 1000).round
        raise InvalidArgument, "#{what} must not be before 1970-01-01 00:00:00 UTC, not #{t}" if v.negative?
        raise InvalidArgument, "#{what} must be after 1970-01-01 00:00:00 UTC, not #{t} (leave it out for none)" if v < min
        raise InvalidArgument, "#{what} must be at most #{MAX_TIME_TEXT}, not #{t}" if v > MAX_MS

        v
      when Integer
        if t < min || t > MAX_MS
          none = t.zero? ? " (leave it out for none)" : ""
          raise InvalidArgument, "#{what} must be epoch milliseconds from #{min} to #{MAX_MS} (#{MAX_TIME_TEXT}), " \
                                 "not #{shown(t)}#{none}"
        end

        t
      else raise InvalidArgument, "#{what} must be a Time or epoch milliseconds (Integer), not #{kind(t)}"
      end
    end

    def now_ms = Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond)

    # The JSON text of +value+, a JSON value only (Native.json_check: a Hash with
    # String or Symbol keys, an Array, a String, an Integer, a finite Float,
    # true, false, nil): anything else is refused with its class and where it
    # is (payload["a"][2]), never stored through its #to_s.
    # Nested as deep as the core stores (1000): a value another runtime wrote that
    # deep is read (#parse) and written back; JSON.generate's default (100) refused
    # a task's result or a forwarded payload past 100 levels.
    GENERATE_OPTS = { max_nesting: 1000 }.freeze

    def dump(value, what = "payload")
      Native.json_check(value, what)
      JSON.generate(value, GENERATE_OPTS)
    rescue JSON::GeneratorError, JSON::NestingError, EncodingError => e
      # (a String that is not valid in its encoding)
      raise InvalidArgument, "#{what} is not JSON-serialisable: #{e.message}"
    end

    # Checks that +value+ is a JSON value (as #dump), without serialising it.
    def json!(value, what)
      Native.json_check(value, what)
      value
    end

    def meta(h)
      return nil if h.nil?
      raise InvalidArgument, "meta must be a Hash, not #{kind(h)}" unless h.is_a?(Hash)

      dump(h, "meta")
    end

    # JSON text the core handed out -> a Ruby value. The core stores values nested
    # up to 1000 deep (written by any runtime); JSON.parse's default max_nesting
    # (100) refused those with a JSON::NestingError: the core's bound applies.
    def parse(text) = JSON.parse(text, max_nesting: false)

    def load(text) = text.nil? ? nil : parse(text)

    # What a refused argument is, in messages: nil, true, false, else its class
    # (as the native layer words it: "job id must be an Integer, not String").
    def kind(v)
      case v
      when nil, true, false then v.inspect
      else v.class.name || v.class.inspect
      end
    end

    def name!(v, what)
      raise InvalidArgument, "#{what} must be a String or Symbol, not #{kind(v)}" unless v.is_a?(String) || v.is_a?(Symbol)

      text(v.to_s, what)
    end

    # A name kept for later use (a task's, its queue, a periodic task's), checked now
    # by the core's rules (tocsin_check_name) rather than when a worker starts with it.
    def core_name!(v, what) = Native.check_name(what, name!(v, what))

    # An optional count of 1..+hi+ (nil: the default); 0, which the core reads as
    # "the default", is refused as Python and Node refuse it.
    def count!(v, what, hi)
      return nil if v.nil?

      int!(v, what)
      raise InvalidArgument, "#{what} must be between 1 and #{hi}, not #{shown(v)}" unless v.between?(1, hi)

      v
    end

    # A String (or Symbol) argument as UTF-8 text; nil when +v+ is nil and +nil_ok+.
    def str!(v, what, nil_ok: false)
      return nil if v.nil? && nil_ok
      unless v.is_a?(String) || v.is_a?(Symbol)
        raise InvalidArgument, "#{what} must be a String, not #{kind(v)}"
      end

      text(v.to_s, what)
    end

    def bool!(v, what)
      raise InvalidArgument, "#{what} must be true or false, not #{kind(v)}" unless v == true || v == false

      v
    end

    # An Integer (not a Float, never rounded; not true/false); nil when +nil_ok+.
    def int!(v, what, nil_ok: false)
      return v if v.is_a?(Integer) || (v.nil? && nil_ok)

      raise InvalidArgument, "#{what} must be an Integer, not #{kind(v)}"
    end

    # A payload size limit in bytes: an Integer >= 1 (the core reads 0 as "the
    # default"), named as the caller wrote it.
    def payload_limit!(v, what, nil_ok: false)
      return nil if v.nil? && nil_ok

      int!(v, what)
      raise InvalidArgument, "#{what} must be >= 1 (bytes), not #{v}" if v < 1

      v
    end

    def array!(v, what)
      raise InvalidArgument, "#{what} must be an Array, not #{kind(v)}" unless v.is_a?(Array)

      v
    end

    def hash!(v, what)
      raise InvalidArgument, "#{what} must be a Hash, not #{kind(v)}" unless v.is_a?(Hash)

      v
    end

    # A database's file: a String or a Pathname (anything with #to_path).
    def path!(v)
      if v.respond_to?(:to_path)
        p = v.to_path
        # (an Integer from it opened a file named after its digits)
        raise InvalidArgument, "path: #{kind(v)}#to_path must return a String, not #{kind(p)}" unless p.is_a?(String)

        return p
      end
      return v if v.is_a?(String)

      raise InvalidArgument, "path must be a String or Pathname, not #{kind(v)}"
    end

    # +s+ as UTF-8 text for the core (which stores UTF-8): a String in another
    # encoding (ISO-8859-1, UTF-16, ...) is transcoded; binary Strings go as
    # they are (the core checks they are UTF-8). nil stays nil.
    # A NUL byte is refused here, where the argument's name is known (C strings end there).
    def text(s, what)
      return nil if s.nil?

      s = s.to_s
      enc = s.encoding
      unless enc == Encoding::UTF_8 || enc == Encoding::BINARY || (enc.ascii_compatible? && s.ascii_only?)
        s = s.encode(Encoding::UTF_8)
      end
      if s.include?("\0")
        shown = s.b[0, 40].inspect
        raise InvalidArgument, "#{what} contains a NUL byte: #{shown}#{s.bytesize > 40 ? "..." : ""}"
      end

      s
    rescue EncodingError => e
      raise InvalidArgument, "#{what} cannot be converted to UTF-8: #{e.message}"
    end

    # A fresh owner id, host:pid:random (the core's).
    def default_owner
      Native.owner_id
    end

    # True when waits must yield to a Fiber scheduler instead of blocking the thread.
    def fiber_scheduler?
      Fiber.respond_to?(:scheduler) && !Fiber.scheduler.nil? && !Fiber.blocking?
    end

    # The longest a wait under a Fiber scheduler sleeps on a descriptor before its
    # caller looks again (seconds).
    FIBER_SLICE = 1.0

    # Waits (under a Fiber scheduler) until +fd+ is readable or +timeout+ seconds
    # pass -- at most FIBER_SLICE: the caller checks again and waits on. A close of
    # the database (in this thread, from another fiber, or in another thread) closes
    # the descriptor, which takes it out of the scheduler's selector without making
    # it readable: a wait without a bound would never end (its close would not reach
    # it); this way the caller's next call raises Tocsin::Closed.
    def wait_fd(io, timeout)
      io.wait_readable(timeout.nil? ? FIBER_SLICE : timeout.clamp(0, FIBER_SLICE))
    end

    def io_for(fd) = IO.for_fd(fd, autoclose: false)
  end
end
