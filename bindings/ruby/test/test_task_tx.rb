# frozen_string_literal: true

require_relative "test_helper"
require "sqlite3"

# Tocsin.current_job.transaction: a task's writes and its ack in one transaction.
class TestTaskTx < Minitest::Test
  include TocsinTest

  def effects(sql = "SELECT count(*) FROM effects")
    conn = ::SQLite3::Database.new(@path)
    conn.busy_timeout = 5000
    conn.get_first_value(sql)
  ensure
    conn&.close
  end

  def with_worker(reg)
    w = Tocsin::Worker.new(db, tasks: reg, scheduler: false)
    th = Thread.new { w.run }
    yield w
  ensure
    w.stop
    th.join(10)
  end

  def setup
    super
    db.execute("CREATE TABLE effects(job INTEGER, attempt INTEGER)")
  end

  # Transactions are db.transaction's: SQL that begins or ends one is refused before it
  # runs (a BEGIN on the shared handle would pull every thread's calls into it).
  def test_execute_cannot_begin_or_end_a_transaction
    db.execute("CREATE TABLE IF NOT EXISTS ctl(x)")
    %w[BEGIN COMMIT ROLLBACK END].push("SAVEPOINT s").each do |sql|
      e = assert_raises(Tocsin::InvalidArgument) { db.execute(sql) }
      assert_match(/may not begin or end a transaction/, e.message)
    end
    db.transaction do |tx|
      tx.execute("INSERT INTO ctl VALUES (1)")
      %w[COMMIT ROLLBACK END].each { |sql| assert_raises(Tocsin::InvalidArgument) { tx.execute(sql) } }
      db.queue("ctl").enqueue(1, tx: tx)
    end
    assert_equal 1, db.queue("ctl").stats["pending"]
  end

  def test_effect_and_ack_commit_together
    reg = {}
    reg["pay"] = Tocsin::Task.new("pay", lambda do |amount|
      job = Tocsin.current_job
      job.transaction do |tx|
        tx.execute("INSERT INTO effects VALUES (#{job.job_id}, #{job.attempt})")
        { "paid" => amount }
      end
      "ignored: the transaction's value is the result"
    end, queue: "pay")
    with_worker(reg) do |w|
      h = db.queue("pay").call("pay", 5)
      assert_equal({ "paid" => 5 }, h.value(timeout: 20))
      assert_nil db.queue("pay").get(h.job_id) # acked
      assert_equal 1, effects
      assert_equal 1, w.processed
    end
  end

  def test_a_raise_inside_rolls_back_both_and_the_job_is_retried
    reg = {}
    reg["flaky"] = Tocsin::Task.new("flaky", lambda do
      job = Tocsin.current_job
      job.transaction do |tx|
        tx.execute("INSERT INTO effects VALUES (#{job.job_id}, #{job.attempt})")
        raise ArgumentError, "first attempt fails" if job.attempt == 1

        job.attempt
      end
    end, queue: "flaky", retries: 2, backoff: 0.01)
    with_worker(reg) do
      h = db.queue("flaky").call("flaky")
      assert_equal 2, h.value(timeout: 20)
      # the first attempt's row rolled back with its (never written) ack
      assert_equal 1, effects
      assert_equal 2, effects("SELECT attempt FROM effects")
    end
  end

  def test_lease_lost_raises_inside_the_transaction_and_rolls_back
    raised = ::Queue.new
    reg = {}
    reg["stolen"] = Tocsin::Task.new("stolen", lambda do
      job = Tocsin.current_job
      # another worker takes the job (its clock is past this run's lease)
      Tocsin.open(@path) do |d2|
        d2.set_time(d2.now + 120_000)
        refute_nil d2.queue("stolen").claim("thief")
      end
      begin
        job.transaction { |tx| tx.execute("INSERT INTO effects VALUES (#{job.job_id}, 0)") }
      rescue Tocsin::LeaseLost => e
        raised << e
        raise
      end
    end, queue: "stolen")
    with_worker(reg) do
      h = db.queue("stolen").call("stolen")
      e = raised.pop
      assert_match(/lease was lost/, e.message)
      assert_equal 0, effects # rolled back with the refused ack
      assert_equal "processing", db.queue("stolen").get(h.job_id).state # the thief's now
    end
  end

  def test_current_job_outside_a_task_and_a_second_transaction_are_refused
    e = assert_raises(Tocsin::InvalidArgument) { Tocsin.current_job }
    assert_match(/only available inside a task/, e.message)
    errs = ::Queue.new
    reg = {}
    reg["twice"] = Tocsin::Task.new("twice", lambda do
      job = Tocsin.current_job
      job.transaction { |_tx| 1 }
      begin
        job.transaction { |_tx| 2 }
      rescue Tocsin::InvalidArgument => e
        errs << e
      end
    end, queue: "twice", retries: 0)
    with_worker(reg) do
      assert_equal 1, db.queue("twice").call("twice").value(timeout: 20)
      assert_match(/already used/, errs.pop.message)
    end
  end
end
