# frozen_string_literal: true

module Tocsin
  # A stream event (offset, topic, key, payload, meta, created_at).
  Event = Struct.new(:offset, :topic, :key, :payload_json, :meta_json, :created_at) do
    def payload = Util.parse(payload_json)
    def meta = Util.load(meta_json)
  end

  # A notification (id, channel, payload, meta, created_at).
  Notification = Struct.new(:id, :channel, :key, :payload_json, :meta_json, :created_at) do
    def payload = Util.parse(payload_json)
    def meta = Util.load(meta_json)
  end

  # A durable stream (Database#stream).
  class Stream
    attr_reader :db, :topic

    def initialize(db, topic)
      @db = db
      @topic = topic
    end

    def inspect = "#<Tocsin::Stream #{@topic}>"

    # Appends an event; returns its offset.
    def publish(payload, key: nil, meta: nil, tx: nil)
      @db.handle(tx).publish(@topic, Util.dump(payload), Util.str!(key, "key", nil_ok: true), Util.meta(meta))
    end

    # Appends every payload atomically (+keys+: nil, or one key -- a String or nil -- per payload).
    def publish_many(payloads, keys: nil, tx: nil)
      Util.array!(payloads, "payloads")
      Util.array!(keys, "keys") unless keys.nil?
      @db.handle(tx).publish_many(@topic, payloads.each_with_index.map { |p, i| Util.dump(p, "payloads[#{i}]") },
                                  keys&.each_with_index&.map { |k, i| Util.str!(k, "keys[#{i}]", nil_ok: true) })
    end

    def read(after: 0, limit: 100) = @db.native.stream_read(@topic, after, limit).map { |r| Event.new(*r) }
    def save_offset(consumer, offset) = @db.native.save_offset(Util.name!(consumer, "consumer"), @topic, offset)
    def offset(consumer) = @db.native.stream_offset(Util.name!(consumer, "consumer"), @topic)

    # Deletes events older than +max_age+ seconds, beyond the newest +max_count+,
    # and/or (+below_consumers+) those every consumer has passed. Returns the count.
    # (The core reads a 0 of max_age or max_count as "no such criterion": an explicit
    # 0 -- "keep none" -- is refused, not read as "trim nothing by it".)
    def trim(max_age: nil, max_count: nil, below_consumers: false)
      age = Util.ms(max_age, "max_age", positive: true)
      Util.int!(max_count, "max_count", nil_ok: true)
      if !max_count.nil? && max_count < 1
        raise InvalidArgument, "max_count must be >= 1, not #{Util.shown(max_count)} (leave it out for no limit)"
      end
      # (the core's message names max_age_ms)
      if (age.nil? || age.zero?) && (max_count.nil? || max_count.zero?) && !Util.bool!(below_consumers, "below_consumers")
        raise InvalidArgument, "trim needs max_age:, max_count: or below_consumers: true"
      end

      @db.native.stream_trim(@topic, age, max_count, below_consumers)
    end

    # Replays from the consumer's saved offset (or +from_offset+), then goes live.
    # With a block, yields each Event until the block breaks (or +timeout+ idle
    # seconds); without, returns the StreamSubscription. A named consumer's offset
    # is saved when the subscription ends (the end of the block, a +break+, #close):
    # the last event handed out, so the next subscription resumes after it (a block
    # that raises has not processed its event: the offset before it); also as
    # it goes (+autosave_every+ events / +autosave+ seconds; by default every 100 /
    # 1 s). +save_on_close: false+ (without autosave) leaves the offset alone.
    def subscribe(consumer: nil, from_offset: nil, batch: 100, autosave_every: nil, autosave: nil,
                  timeout: nil, save_on_close: true, &block)
      Util.bool!(save_on_close, "save_on_close")
      consumer = Util.name!(consumer, "consumer") unless consumer.nil?
      Util.ms(timeout, "timeout")
      # (the core reads a from_offset of -1 as "the saved offset" and an autosave_every
      # of 0 as "none": leave them out for those, as in Python and Node)
      if !from_offset.nil? && !(Util.int!(from_offset, "from_offset") >= 0)
        raise InvalidArgument, "from_offset must be >= 0, not #{Util.shown(from_offset)}"
      end
      if !autosave_every.nil? && !(Util.int!(autosave_every, "autosave_every") >= 1)
        raise InvalidArgument, "autosave_every must be >= 1, not #{Util.shown(autosave_every)} (leave it out for none)"
      end
      if consumer && save_on_close && autosave_every.nil? && autosave.nil?
        autosave_every = 100
        autosave = 1
      end
      s = StreamSubscription.new(@db, @topic, consumer, from_offset, batch, autosave_every, Util.ms(autosave, "autosave", positive: true),
                                 save_on_close && !consumer.nil?)
      return s unless block

      begin
        s.each(timeout: timeout, &block)
      ensure
        s.close
      end
    end
  end

  # Shared by Listener and StreamSubscription: blocking waits without the GVL,
  # fd waits under a Fiber scheduler, #each / Enumerator.
  module MessageSource
    include Enumerable

    def fd = @native.fd
    def to_io = (@io ||= Util.io_for(fd))

    # Interrupts a #next of another thread (it raises Tocsin::Interrupted).
    def poke = @native.poke

    # The messages that arrived (at least one), or [] after +timeout+ seconds.
    def next_batch(timeout: nil)
      ms = Util.ms(timeout, "timeout")
      if Util.fiber_scheduler?
        deadline = timeout && Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
        loop do
          rows = @native.next(0)
          return rows.map { |r| wrap(r) } unless rows.empty?

          left = deadline && deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          return [] if left && left <= 0

          Util.wait_fd(to_io, left)
        end
      end
      @native.next(ms).map { |r| wrap(r) }
    end

    # Yields every message; ends when +timeout+ idle seconds pass (nil: never).
    def each(timeout: nil)
      Util.ms(timeout, "timeout")
      return enum_for(:each, timeout: timeout) unless block_given?

      loop do
        mark = resume_mark
        # the batch being handed out, how much of it was, and whether the rest is left
        # to the core (a save mid-batch moved its position back: the rest comes again)
        cur = @iter = { batch: [], handed: 0, cut: false, failed: false, mark: mark }
        begin
          cur[:batch] = next_batch(timeout: timeout)
          break if cur[:batch].empty?

          cur[:batch].each do |m|
            break if cur[:cut]

            cur[:handed] += 1
            begin
              yield m
            rescue Exception # rubocop:disable Lint/RescueException -- re-raised
              cur[:failed] = true # (a break is no exception: it counts the event)
              raise
            end
          end
        ensure
          @iter = nil
          # left mid-batch (break, raise; an interrupt as the batch came back, before
          # any of it was handed out): the rest of the batch was not handed out. A block
          # that raised did not process its event either: it comes again.
          done = cur[:handed] - (cur[:failed] ? 1 : 0)
          if done < cur[:batch].size && !cur[:cut] && !@closed
            done.positive? ? stopped_at(cur[:batch][done - 1]) : resume_from(mark)
          end
        end
      end
      self
    end

    def closed? = @closed

    def stopped_at(_message) = nil

    # @api private: where to go back to when a batch came back but none of it was
    # handed out (StreamSubscription: the position before it)
    def resume_mark = nil
    def resume_from(_mark) = nil

    # Ends the subscription. Inside #each mid-batch (#close in the block, or from
    # another thread or an external Enumerator while the block has an event), the
    # rest of the batch is not handed out and the position goes back to the last
    # event that was (what a stream subscription's close saves), as in Node.
    def close
      cur = @iter
      if cur && !cur[:cut] && !@closed
        cur[:cut] = true
        done = cur[:handed]
        if done < cur[:batch].size
          done.positive? ? stopped_at(cur[:batch][done - 1]) : resume_from(cur[:mark])
        end
      end
      @closed = true
      @native.close
    end
  end

  # NOTIFY/LISTEN: Database#listen.
  class Listener
    include MessageSource

    def initialize(db, channel, buffer_size)
      @native = Native::Listener.open(db.native, channel, buffer_size)
      @closed = false
      db.track(self)
    end

    # Notifications lost to the bounded buffer so far.
    def dropped = @native.dropped

    private

    def wrap(r) = Notification.new(*r)
  end

  # A stream subscription (Stream#subscribe): replay, then live.
  class StreamSubscription
    include MessageSource

    def initialize(db, topic, consumer, from_offset, batch, every, ms, save_on_close = false)
      @native = Native::StreamSub.open(db.native, topic, consumer, from_offset, batch, every, ms, save_on_close)
      @closed = false
      db.track(self)
    end

    # The offset of the last event handed out (inside #each mid-batch, the core has
    # read further).
    def position
      ev = mid_batch
      ev ? ev.offset : @native.position
    end

    # Saves the last event handed out as the consumer's offset. Inside #each mid-batch,
    # the rest of the batch then comes again from the core (the block gets each once),
    # so no save stores an event that was not handed out.
    def save
      if (ev = mid_batch)
        @native.rewind(ev.offset)
        @iter[:cut] = true
      end
      @native.save
    end

    # As MessageSource#next_batch. An exception on the way out -- an interrupt
    # (Thread#raise, Timeout) landing as the batch came back from the core --
    # must not lose the batch: the position goes back to where it stood, so the
    # batch comes again and no save stores more than was handed out.
    def next_batch(timeout: nil)
      mark = resume_mark
      super
    rescue Exception # rubocop:disable Lint/RescueException -- re-raised
      resume_from(mark)
      raise
    end

    # @api private (#each): the core's position goes back to the last event
    # handed out, which close saves
    def stopped_at(event)
      raise InvalidArgument, "stopped_at takes a Tocsin::Event, not #{Util.kind(event)}" unless event.is_a?(Event)

      @native.rewind(event.offset)
    end

    # @api private
    def resume_mark
      @native.position
    rescue Closed
      nil
    end

    # @api private (the position is then back where it stood before the batch)
    def resume_from(mark)
      return if mark.nil? || @closed

      @native.rewind(mark)
    rescue Error
      nil
    end

    private

    def wrap(r) = Event.new(*r)

    # The last event #each handed out while the block runs mid-batch, else nil.
    def mid_batch
      cur = @iter
      return nil unless cur && !cur[:cut] && cur[:handed].positive? && cur[:handed] < cur[:batch].size

      cur[:batch][cur[:handed] - 1]
    end
  end
end
