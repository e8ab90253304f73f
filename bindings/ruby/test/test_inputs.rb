# frozen_string_literal: true

require_relative "test_helper"

# What a caller may pass that is unusual but valid: text in any encoding, NUL
# bytes inside JSON, frozen and shared Strings; and the trap of a call without
# tx: inside db.transaction.
class TestInputs < Minitest::Test
  include TocsinTest

  # Valid text in any encoding is stored as UTF-8; inside JSON a NUL is text.
  def test_text_in_other_encodings_and_nul_bytes_in_payloads
    q = db.queue("caf\xe9".dup.force_encoding("ISO-8859-1"))
    assert_equal "café", q.name
    id = q.enqueue(["caf\xe9".dup.force_encoding("ISO-8859-1"), "hé".encode("UTF-16LE"), "é".b, "a\0b"],
                   meta: { "hé".encode("UTF-16LE") => "x" })
    job = db.queue("café").get(id)
    assert_equal ["café", "hé", "é", "a\0b"], job.payload
    assert_equal({ "hé" => "x" }, job.meta)
    assert_equal "café", job.queue_name
  end

  # Frozen Strings (literals, shared substrings) go through as they are.
  def test_frozen_and_shared_strings
    long = "queue-name-and-some-more-text-to-share" * 3
    name = long[0, 10].freeze
    q = db.queue(name)
    id = q.enqueue("x".freeze, unique_key: long[5, 12].freeze, meta: { "k".freeze => "v".freeze }.freeze)
    assert_equal "x", q.get(id).payload
    db.execute("SELECT 1;-- comment comment comment"[0, 9].freeze)
  end

  # A call on this database without tx: inside db.transaction waits for the write
  # lock the block's own transaction holds: a nested db.transaction is refused at
  # once, and the Busy that such a call gets in the end says why.
  def test_a_transaction_inside_a_transaction
    e = assert_raises(Tocsin::InvalidArgument) { db.transaction { db.transaction { flunk } } }
    assert_match(/db\.transaction inside a db\.transaction block of the same database/, e.message)
    Tocsin.open(@path, busy_timeout: 0.1) do |d|
      e = assert_raises(Tocsin::Busy) { d.transaction { |_tx| d.queue("q").enqueue(1) } }
      assert_match(/inside db\.transaction.*pass tx: tx/, e.message)
      assert_equal Tocsin::Busy::CODE, e.code
      id = d.transaction { |tx| d.queue("t").enqueue(1, tx: tx) } # usable again, and tx: joins it
      assert_equal 1, d.queue("t").get(id).payload
    end
    refute Thread.current.keys.any? { |k| k.to_s.start_with?("tocsin_tx_") && Thread.current[k] }
  end
end
