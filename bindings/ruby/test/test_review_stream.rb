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
