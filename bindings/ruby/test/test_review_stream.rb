# frozen_string_literal: true

require_relative "test_helper"

# Regressions of a stream review: inside #each mid-batch, StreamSubscription#save and
# #position mean the last event handed out, not the end of the batch the core read.
class TestStreamSaveMidBatch < Minitest::Test
  include TocsinTest

  def test_save_mid_batch_saves_the_last_event_handed_out
    s = db.stream("mid")
    offs = s.publish_many((0..9).to_a)
    sub = s.subscribe(consumer: "c", batch: 100, save_on_close: false)
    got = []
    sub.each do |e|
      got << e.payload
      assert_equal e.offset, sub.position
      if e.payload == 2
        sub.save
        assert_equal offs[2], s.offset("c") # was the batch end: 3..9 skipped after a crash
      end
      break if e.payload == 9
    end
    sub.close
    assert_equal (0..9).to_a, got # the rest of the batch came again, each event once
    assert_equal offs[2], s.offset("c")
    # a save, then a break in the same block: close saves that event
    sub = s.subscribe(consumer: "e", batch: 100)
    sub.each do |e|
      if e.payload == 5
        sub.save
        break
      end
    end
    sub.close
    assert_equal offs[5], s.offset("e")
    assert_equal [6], s.subscribe(consumer: "e").each.first(1).map(&:payload)
  end
end

# Regressions of a streams review: #close mid-batch (in the block, or with an external
# Enumerator suspended in it) handed the rest of the batch to the block after the close
# and saved the end of the batch the core had read, not the last event handed out.
class TestStreamCloseMidBatch < Minitest::Test
  include TocsinTest

  def test_close_in_the_block_stops_and_saves_the_last_event_handed_out
    s = db.stream("close-mid")
    offs = s.publish_many((0..9).to_a)
    sub = s.subscribe(consumer: "c", batch: 10)
    got = []
    assert_raises(Tocsin::Closed) do # as Node's loop after close(): the wait finds it closed
      sub.each do |e|
        got << e.payload
        sub.close if e.payload == 2
      end
    end
    assert_equal [0, 1, 2], got # nothing handed out after the close
    assert_equal offs[2], s.offset("c") # was offs[9]: 3..9 never handed out, counted as processed
    assert_equal [3], s.subscribe(consumer: "c").each.first(1).map(&:payload)
  end

  def test_close_with_an_enumerator_mid_batch_saves_the_last_event_handed_out
    s = db.stream("enum-mid")
    offs = s.publish_many((0..9).to_a)
    sub = s.subscribe(consumer: "c", batch: 10)
    en = sub.each
    3.times { en.next }
    assert_equal offs[2], sub.position
    sub.close
    assert_equal offs[2], s.offset("c")
  end

  def test_close_of_a_listener_in_the_block_hands_out_nothing_more
    l = db.listen("ch")
    3.times { |i| db.notify("ch", i) }
    got = []
    assert_raises(Tocsin::Closed) do
      l.each do |n|
        got << n.payload
        l.close if n.payload == 0
      end
    end
    assert_equal [0], got
  end
end
