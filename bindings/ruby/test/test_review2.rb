# frozen_string_literal: true

require_relative "test_helper"

# Regressions of a second review: closing what a wait runs on, circular payloads.
class TestReview2 < Minitest::Test
  include TocsinTest

  # Database#close closes the listeners and stream subscriptions made from it: a
  # thread waiting on one gets Tocsin::Closed (it waited on forever before), and
  # one used after the close says it is closed (it returned [] before).
  def test_close_ends_listeners_and_stream_subscriptions
    script = <<~RUBY
      require "tocsin"
      Thread.report_on_exception = false
      db = Tocsin.open(ARGV[0])
      waits = [Thread.new { db.listen("c") {} }, Thread.new { db.stream("s").subscribe(consumer: "x") {} }]
      idle = [db.listen("c2"), db.stream("s").subscribe(consumer: "y")]
      sleep 0.3
      db.close
      waits.each do |t|
        t.join(5) or abort("a wait outlived close")
        t.value
        abort("a wait returned")
      rescue Tocsin::Closed
        nil
      end
      idle.each do |src|
        abort("not closed") unless src.closed?
        begin
          src.next_batch(timeout: 0.1)
          abort("next_batch after close did not raise")
        rescue Tocsin::Closed
          nil
        end
      end
      puts "ok"
    RUBY
    out, err, st = Open3.capture3(*ruby_cmd("-e", script, @path))
    assert st.success?, "#{out}\n#{err}"
    assert_equal "ok\n", out
  end

  # A trap handler that closes the listener (or subscription) the main thread
  # waits on: the wait raises Tocsin::Closed instead of resuming on the freed
  # handle.
  def test_trap_closing_the_waited_on_source
    %w[listen stream].each do |kind|
      script = <<~RUBY
        require "tocsin"
        db = Tocsin.open(ARGV[0])
        src = ARGV[1] == "listen" ? db.listen("c") : db.stream("s").subscribe(consumer: "x")
        trap("USR1") { src.close }
        $stdout.puts "ready"; $stdout.flush
        begin
          src.each { |m| p m }
          puts "returned"
        rescue Tocsin::Closed
          puts "closed"
        end
      RUBY
      Open3.popen2(*ruby_cmd("-e", script, @path, kind)) do |_in, out, th|
        assert_equal "ready\n", out.gets
        sleep 0.3
        Process.kill("USR1", th.pid)
        unless th.join(10)
          Process.kill("KILL", th.pid)
          flunk "#{kind}: the wait outlived the close in the trap"
        end
        assert_equal "closed\n", out.read, kind
      end
    end
  end

  # A circular or too deeply nested payload is an InvalidArgument (a
  # JSON::NestingError escaped before), and nothing is written.
  def test_circular_payload_is_refused
    a = []
    a << a
    q = db.queue("q")
    e = assert_raises(Tocsin::InvalidArgument) { q.enqueue(a) }
    assert_match(/payload.* is nested deeper than 1000 levels \(or contains itself\)/, e.message)
    deep = (1..1200).reduce([]) { |acc, _| [acc] }
    assert_raises(Tocsin::InvalidArgument) { q.enqueue(deep) }
    assert_raises(Tocsin::InvalidArgument) { db.stream("s").publish(a) }
    assert_equal 0, q.stats["pending"]
  end
end
