# frozen_string_literal: true

require_relative "test_helper"

class TestAPI < Minitest::Test
  include TocsinTest

  def test_open_with_block_closes_and_returns_value
    d = nil
    v = Tocsin.open(@path) { |x| d = x; x.queue("q").enqueue(1) }
    assert_equal 1, v
    assert d.closed?
    assert_raises(Tocsin::Closed) { d.queue("q").enqueue(1) }
  end

  def test_versions
    assert_equal File.read(File.join(ROOT, "VERSION")).strip, Tocsin::VERSION
    assert_equal Tocsin::VERSION, Tocsin.core_version
    assert_match(/\A3\.\d+/, Tocsin.sqlite_version)
  end

  def test_enqueue_claim_ack_with_options
    q = db.queue("emails")
    low = q.enqueue({ "to" => "low" })
    high = q.enqueue({ "to" => "high" }, priority: 5, meta: { "trace" => "t1" }, max_attempts: 7)
    job = q.claim("w1", visibility: 10)
    assert_equal high, job.id
    assert_equal({ "to" => "high" }, job.payload)
    assert_equal({ "trace" => "t1" }, job.meta)
    assert_equal [1, 7, "processing", "w1"], [job.attempts, job.max_attempts, job.state, job.worker]
    assert job.ack
    refute job.ack, "a second ack finds no lease"
    assert_nil q.get(high)
    assert_equal low, q.claim("w1").id
  end

  def test_unique_key_and_delay_and_enqueue_many
    q = db.queue("q")
    a = q.enqueue(1, unique_key: "k")
    assert_equal a, q.enqueue(2, unique_key: "k")
    q.enqueue(3, delay: 60)
    assert_equal "scheduled", q.stats.then { |s| s["scheduled"] == 1 ? "scheduled" : s }
    ids = q.enqueue_many([10, { payload: 11, priority: 3 }])
    assert_equal 2, ids.size
    assert_equal 11, q.claim("w").payload
  end

  def test_bad_input_is_invalid_argument_and_writes_nothing
    q = db.queue("q")
    assert_raises(Tocsin::InvalidArgument) { db.queue("").enqueue(1) }
    assert_raises(Tocsin::InvalidArgument) { q.enqueue(1, max_attempts: 0) }
    assert_raises(Tocsin::InvalidArgument) { q.enqueue(1, meta: "not a hash") }
    assert_raises(Tocsin::InvalidArgument) { q.enqueue(1, delay: "soon") }
    assert_raises(Tocsin::InvalidArgument) { q.enqueue(Float::NAN) }
    assert_raises(Tocsin::InvalidArgument) { q.claim("") }
    assert_raises(Tocsin::InvalidArgument) { q.enqueue_many([1, { payload: 2, bogus: 1 }]) }
    assert_raises(Tocsin::InvalidArgument) { q.enqueue_many([1, { payload: 2, max_attempts: -1 }]) }
    assert_raises(Tocsin::InvalidArgument) { db.stream("").publish(1) }
    assert_raises(Tocsin::InvalidArgument) { db.notify("bad\nname", 1) }
    assert_raises(Tocsin::InvalidArgument) { db.lock("l", ttl: 0).try_acquire }
    assert_raises(Tocsin::InvalidArgument) { db.rate_limit("r", limit: 0, per: 1).try }
    assert_raises(Tocsin::InvalidArgument) { db.schedule("s", "61 * * * *", queue: "q") }
    assert_raises(Tocsin::InvalidArgument) { q.call("") }
    assert_raises(Tocsin::InvalidArgument) { q.claim("w\0x") } # not cut at the NUL
    assert_equal 0, q.stats["pending"]
    assert_equal [], db.stream("s").read
    e = assert_raises(Tocsin::InvalidArgument) { q.enqueue(1, max_attempts: 0) }
    assert_equal 2, e.code
    assert_kind_of Tocsin::Error, e
  end

  def test_payload_too_big
    db.max_payload = 100
    assert_raises(Tocsin::TooBig) { db.queue("q").enqueue("x" * 200) }
    assert_equal 0, db.queue("q").stats["pending"]
  end

  def test_transaction_commit_and_rollback
    db.execute("CREATE TABLE orders(id INTEGER PRIMARY KEY, total INTEGER)")
    q = db.queue("emails")
    db.transaction do |tx|
      tx.execute("INSERT INTO orders(total) VALUES (990)")
      q.enqueue({ order: 1 }, tx: tx)
      db.stream("orders").publish({ id: 1 }, tx: tx)
      db.notify("orders", { id: 1 }, tx: tx)
      assert_equal 0, q.stats["pending"], "not visible before commit"
    end
    assert_equal 1, q.stats["pending"]
    assert_raises(RuntimeError) do
      db.transaction do |tx|
        tx.execute("INSERT INTO orders(total) VALUES (5)")
        tx.enqueue("emails", { order: 2 })
        tx.publish("orders", { id: 2 })
        raise "payment declined"
      end
    end
    assert_equal 1, q.stats["pending"]
    assert_equal 1, db.stream("orders").read.size
    assert_equal 1, db.notifications("orders").size
    other = Tocsin.open(@path)
    assert_raises(Tocsin::InvalidArgument) { db.transaction { |tx| other.queue("q").enqueue(1, tx: tx) } }
    other.close
  end

  def test_ack_and_result_inside_transaction
    q = db.queue("q")
    q.enqueue(1)
    job = q.claim("w")
    assert_raises(RuntimeError) do
      db.transaction do |tx|
        assert job.ack(tx: tx)
        db.save_result(job.id, { "ok" => true }, tx: tx)
        raise "boom"
      end
    end
    assert_nil db.result(job.id)
    assert_equal "processing", q.get(job.id).state
    db.transaction do |tx|
      job.ack(tx: tx)
      db.save_result(job.id, { "ok" => true }, tx: tx)
    end
    assert_nil q.get(job.id)
    assert_equal({ "ok" => true }, db.result(job.id).value)
  end

  def test_fencing_stale_holder_gets_false
    t0 = 1_700_000_000_000
    db.set_time(t0)
    q = db.queue("q")
    q.enqueue(1, max_attempts: 5)
    first = q.claim("w1", visibility: 10)
    db.set_time(t0 + 11_000) # the lease lapsed
    second = q.claim("w2", visibility: 10)
    assert_equal first.id, second.id
    refute_equal first.token, second.token
    refute first.ack, "the stale holder cannot ack"
    refute first.heartbeat(extend: 10)
    refute first.retry(delay: 0)
    refute first.fail(error: "x")
    assert second.heartbeat(extend: 10)
    assert second.ack
  end

  def test_retry_fail_dead_letters_requeue_purge_cancel
    q = db.queue("q")
    id = q.enqueue(1, max_attempts: 1)
    job = q.claim("w")
    assert job.retry(delay: 0, error: "flaky")
    dead = q.dead_letters
    assert_equal [id], dead.map(&:id)
    assert_equal "max_attempts", dead.first.reason
    assert q.requeue(id)
    assert_equal "pending", q.get(id).state
    q.claim("w").fail(error: "nope")
    assert_equal "failed", q.get(id).reason
    assert_equal 1, q.purge
    c = q.enqueue(2)
    assert q.cancel(c)
    assert_equal "cancelled", q.get(c).reason
    refute q.cancel(c)
  end

  def test_pause_resume_stats
    q = db.queue("q")
    q.enqueue(1)
    q.pause
    assert q.paused?
    assert_nil q.claim("w")
    q.resume
    refute q.paused?
    s = q.stats
    assert_equal 1, s["pending"]
    assert_equal ["q"], db.stats.map { |x| x["queue"] }
    refute_nil q.next_deadline
  end

  def test_each_job_acks_and_retries_and_enumerator
    q = db.queue("q")
    3.times { |i| q.enqueue(i) }
    seen = []
    q.each_job("w", timeout: 0.05) { |job| seen << job.payload }
    assert_equal [0, 1, 2], seen
    assert_equal 0, q.stats["pending"] + q.stats["processing"]

    q.enqueue("bad", max_attempts: 3)
    assert_raises(ArgumentError) { q.each_job("w", timeout: 0.05) { raise ArgumentError, "no" } }
    j = q.dead_letters.first || q.get(q.stats["pending"].positive? ? 4 : 4)
    refute_nil j
    assert_match(/ArgumentError: no/, j.last_error)

    q.enqueue("e1")
    q.enqueue("e2")
    en = q.each_job("w2", timeout: 0.05)
    assert_kind_of Enumerator, en
    assert_equal %w[e1 e2], en.first(2).map(&:payload).reject { |p| p == "bad" }.first(2) | []
  end

  def test_queue_wait_wakes_on_commit_from_another_thread
    q = db.queue("q")
    t = Thread.new { sleep 0.1; Tocsin.open(@path) { |d| d.queue("q").enqueue(1) } }
    assert q.wait(timeout: 5)
    t.join
    refute db.queue("empty").wait(timeout: 0.05)
  end

  def test_streams_subscribe_replay_and_offsets
    s = db.stream("orders")
    offs = s.publish_many([{ n: 1 }, { n: 2 }], keys: %w[a b])
    s.publish({ n: 3 }, key: "c", meta: { "m" => 1 })
    got = []
    s.subscribe(consumer: "billing", timeout: 0.05) { |e| got << e.payload["n"] }
    assert_equal [1, 2, 3], got
    assert_equal offs.first + 2, s.offset("billing")
    s.publish({ n: 4 })
    again = []
    s.subscribe(consumer: "billing", timeout: 0.05) { |e| again << e.payload["n"] }
    assert_equal [4], again
    assert_equal %w[a b c], s.read.first(3).map(&:key)
    assert_equal 1, s.read.last(2).first.meta["m"]
    assert_equal 2, s.trim(max_count: 2)
    sub = s.subscribe(from_offset: 0)
    assert_kind_of Tocsin::StreamSubscription, sub
    assert_equal 2, sub.next_batch(timeout: 1).size
    sub.close
  end

  # A named consumer's offset is saved when the subscription ends, also on a break
  # mid-batch: the next subscription resumes after the last event seen.
  # save_on_close: false leaves the offset where it was.
  def test_stream_offset_saved_when_the_subscription_ends
    s = db.stream("soc")
    offs = s.publish_many((1..6).map { |n| { n: n } })
    seen = []
    s.subscribe(consumer: "c", batch: 10) do |e|
      seen << e.payload["n"]
      break if seen.size == 2 # 3..6 were fetched, not handed out
    end
    assert_equal [1, 2], seen
    assert_equal offs[1], s.offset("c")
    again = []
    s.subscribe(consumer: "c", batch: 10) do |e|
      again << e.payload["n"]
      break
    end
    assert_equal [3], again
    sub = s.subscribe(consumer: "c") # #close after a batch: all of it handed out
    assert_equal [4, 5, 6], sub.next_batch(timeout: 1).map { |e| e.payload["n"] }
    sub.close
    assert_equal offs[5], s.offset("c")
    s.publish({ n: 7 })
    s.subscribe(consumer: "c", save_on_close: false) { |_e| break }
    sub = s.subscribe(consumer: "c", save_on_close: false)
    assert_equal 1, sub.next_batch(timeout: 1).size
    sub.close
    assert_equal offs[5], s.offset("c")
    e = assert_raises(Tocsin::InvalidArgument) { s.subscribe(consumer: "c", save_on_close: "no") }
    assert_match(/save_on_close must be true or false/, e.message)
  end

  # A block that raises has not processed its event: the offset saved is the one
  # before it, so the event comes again (at-least-once); a break counts it.
  def test_a_block_that_raises_does_not_count_its_event
    s = db.stream("raise")
    offs = s.publish_many((0..9).map { |n| { n: n } })
    [[100, 3], [1, 5], [3, 6], [4, 0], [10, 9]].each do |batch, failing|
      consumer = "c#{batch}_#{failing}"
      assert_raises(ArgumentError) do
        s.subscribe(consumer: consumer, batch: batch) do |e|
          raise ArgumentError, "handler failed" if e.payload["n"] == failing
        end
      end
      assert_equal(failing.zero? ? 0 : offs[failing - 1], s.offset(consumer), consumer)
      s.subscribe(consumer: consumer, batch: batch) do |e|
        assert_equal failing, e.payload["n"]
        break
      end
    end
    # #each on a subscription kept by the caller: the same
    sub = s.subscribe(consumer: "each", batch: 4)
    assert_raises(RuntimeError) { sub.each { |e| raise "no" if e.payload["n"] == 2 } }
    sub.close
    assert_equal offs[1], s.offset("each")
  end

  def test_listen_with_block_and_listener
    got = []
    t = Thread.new do
      db.listen("orders", timeout: 2) do |n|
        got << n.payload
        break if got.size == 2
      end
    end
    sleep 0.1
    Tocsin.open(@path) do |d|
      d.notify("orders", { "id" => 1 })
      d.notify("other", { "id" => 9 })
      d.notify("orders", { "id" => 2 }, meta: { "from" => "web" })
    end
    t.join
    assert_equal [{ "id" => 1 }, { "id" => 2 }], got
    l = db.listen("c", buffer_size: 1)
    db.notify("c", 1)
    db.notify("c", 2)
    assert_equal [2], l.next_batch(timeout: 1).map(&:payload)
    assert_equal 1, l.dropped
    l.close
    assert_raises(Tocsin::Closed) { l.next_batch(timeout: 0) }
  end

  def test_locks_with_lock_and_fencing
    tokens = []
    db.with_lock("report", ttl: 5) do |l|
      tokens << l.token
      other = db.lock("report", ttl: 5, owner: "someone-else")
      refute other.try_acquire
      refute other.acquire(timeout: 0.05)
    end
    db.with_lock("report", ttl: 5) { |l| tokens << l.token }
    assert_equal tokens.first + 1, tokens.last
    assert_nil db.lock_holder("report").first

    t0 = 1_700_000_000_000
    db.set_time(t0)
    a = db.lock("x", ttl: 1, owner: "a")
    assert a.try_acquire
    db.set_time(t0 + 2000)
    b = db.lock("x", ttl: 1, owner: "b")
    assert b.try_acquire
    refute a.renew, "a stale holder cannot renew"
    refute a.release
    assert b.token > a.token
  end

  def test_with_lock_waits_for_release
    l = db.lock("w", ttl: 30, owner: "holder")
    assert l.try_acquire
    t = Thread.new { sleep 0.1; l.release }
    got = db.with_lock("w", ttl: 5, timeout: 5) { |x| x.token }
    t.join
    assert got > l.token || got.positive?
    l2 = db.lock("w2", ttl: 30, owner: "h")
    l2.try_acquire
    assert_raises(Tocsin::Timeout) { db.with_lock("w2", timeout: 0.05) { flunk } }
  end

  def test_rate_limit
    t0 = 1_700_000_000_000
    db.set_time(t0)
    rl = db.rate_limit("api", limit: 2, per: 1)
    assert rl.try.allowed?
    assert rl.try.allowed?
    d = rl.try
    refute d.allowed?
    assert_equal 1000, d.retry_after_ms
    db.set_time(t0 + 1001)
    assert rl.try.allowed?
    assert rl.reset.positive?
  end

  def test_results_and_prune
    db.save_result(1, [1, 2], ttl: 10)
    assert_equal [1, 2], db.result(1).value
    db.save_error(2, "ValueError", "bad")
    r = db.result(2)
    assert r.error?
    assert_equal %w[ValueError bad], [r.error_type, r.error_message]
    assert db.delete_result(2)
    db.set_time(Tocsin::Util.now_ms + 60_000)
    db.notify("c", 1)
    out = db.prune(notifications_max_age: 1, dead_before: Time.now + 3600)
    assert_equal 1, out[:results]
    assert_kind_of Integer, out[:notifications]
    assert_raises(Tocsin::NotFound) { db.wait_result(99, timeout: 0.05) }
    db.set_time(nil) # deadlines are read from the handle's clock: let it run
    pending = db.queue("q").enqueue(1)
    assert_raises(Tocsin::Timeout) { db.wait_result(pending, timeout: 0.05) }
  end

  def test_schedules_and_scheduler_tick
    t0 = 1_700_000_000_000 - (1_700_000_000_000 % 60_000)
    db.set_time(t0)
    nxt = db.schedule("nightly", "* * * * *", queue: "cron", payload: { "k" => 1 }, priority: 2)
    assert_equal t0 + 60_000, nxt
    s = db.get_schedule("nightly")
    assert_equal ["* * * * *", "cron", 2], [s.cron, s.queue, s.priority]
    db.set_time(t0 + 60_000)
    assert_equal 1, db.scheduler_tick
    job = db.queue("cron").claim("w")
    assert_equal({ "k" => 1 }, job.payload)
    assert_equal "nightly", job.meta["tocsin_schedule"]
    db.update_schedule("nightly", priority: 9)
    assert_equal 9, db.get_schedule("nightly").priority
    assert_equal "cron", db.get_schedule("nightly").queue
    db.pause_schedule("nightly")
    assert db.get_schedule("nightly").paused?
    assert_equal 1, db.schedules.size
    assert db.unschedule("nightly")
    assert_raises(Tocsin::NotFound) { db.pause_schedule("nightly") }
    assert_equal t0 + 60_000, Tocsin.cron_next("* * * * *", after: t0)
  end

  def test_task_call_envelope_and_result_in_process
    Tocsin.open(@path) do |d|
      h = d.queue("math").call("add", 2, 3, kwargs: { "scale" => 2 }, result_ttl: 60)
      job = d.queue("math").get(h.job_id)
      assert_equal({ "task" => "add", "args" => [2, 3], "kwargs" => { "scale" => 2 }, "result_ttl_ms" => 60_000 },
                   job.payload)
      refute h.done?
    end
  end
end
