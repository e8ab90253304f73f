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

    # seconds (Numeric) -> ms; nil stays nil. The core checks the ranges.
    def ms(seconds, what = "duration")
      return nil if seconds.nil?
      raise InvalidArgument, "#{what} must be a number of seconds, not #{seconds.class}" unless seconds.is_a?(Numeric)

      (seconds * 1000).round
    end

    # Time / epoch ms (Integer) -> ms
    def instant_ms(t)
      case t
      when nil then nil
      when Time then (t.to_r * 1000).round
      when Integer then t
      else raise InvalidArgument, "an instant is a Time or epoch milliseconds, not #{t.class}"
      end
    end

    def now_ms = Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond)

    def dump(value, what = "payload")
      JSON.generate(value)
    rescue JSON::GeneratorError, Encoding::UndefinedConversionError => e
      raise InvalidArgument, "#{what} is not JSON-serialisable: #{e.message}"
    end

    def meta(h)
      return nil if h.nil?
      raise InvalidArgument, "meta must be a Hash" unless h.is_a?(Hash)

      JSON.generate(h)
    end

    def load(text) = text.nil? ? nil : JSON.parse(text)

    def name!(v, what)
      raise InvalidArgument, "#{what} must be a String or Symbol" unless v.is_a?(String) || v.is_a?(Symbol)

      v.to_s
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
