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

    # seconds (Numeric) -> ms; nil stays nil. The core checks the ranges (a
    # value beyond 64 bits, NaN or an infinity cannot reach it: refused here).
    def ms(seconds, what = "duration", nil_ok: true)
      if seconds.nil?
        return nil if nil_ok

        raise InvalidArgument, "#{what} must be a number of seconds, not nil"
      end
      unless seconds.is_a?(Numeric) && seconds.real?
        raise InvalidArgument, "#{what} must be a number of seconds, not #{kind(seconds)}"
      end
      # (a Numeric of the application's may lack what a number of seconds needs)
      f = number_op(seconds, what) { Float(seconds) }
      raise InvalidArgument, "#{what} must be a finite number of seconds, not #{seconds}" if f.nan? || f.infinite?
      # no duration is negative: the core reads some negative values as "none" or
      # "the backoff", which a caller spells by leaving the option out
      raise InvalidArgument, "#{what} must be >= 0 seconds, not #{seconds}" if f.negative?

      v = number_op(seconds, what) { (seconds * 1000).round }
      raise InvalidArgument, "#{what} is out of range: #{seconds} seconds" unless v.is_a?(Integer) && INT64.cover?(v)

      v
    end

    def number_op(seconds, what)
      yield
    rescue StandardError => e
      raise InvalidArgument, "#{what} must be a number of seconds: #{kind(seconds)} cannot be used as one (#{e.class})"
    end

    # Time / epoch ms (Integer) -> ms
    def instant_ms(t, what = "instant")
      v = case t
          when nil then return nil
          when Time then (t.to_r * 1000).round
          when Integer then t
          else raise InvalidArgument, "#{what} must be a Time or epoch milliseconds (Integer), not #{kind(t)}"
          end
      raise InvalidArgument, "#{what} is out of range: #{t.inspect}" unless INT64.cover?(v)

      v
    end

    def now_ms = Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond)

    # The JSON text of +value+, a JSON value only (Native.json_check: a Hash with
    # String or Symbol keys, an Array, a String, an Integer, a finite Float,
    # true, false, nil): anything else is refused with its class and where it
    # is (payload["a"][2]), never stored through its #to_s.
    def dump(value, what = "payload")
      Native.json_check(value, what)
      JSON.generate(value)
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

    def load(text) = text.nil? ? nil : JSON.parse(text)

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

    # Waits (under a Fiber scheduler) until +fd+ is readable or +timeout+ seconds pass.
    def wait_fd(io, timeout)
      io.wait_readable(timeout.nil? ? nil : [timeout, 0].max)
    end

    def io_for(fd) = IO.for_fd(fd, autoclose: false)
  end
end
