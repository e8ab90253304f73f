# frozen_string_literal: true

require_relative "test_helper"

# Regressions of a third review: values nested deeper than JSON.parse's default
# bound, a task that exits, the sqlite3-gem helpers' errors, a worker whose
# database closes under it, enqueue_many's job specs.

# Values another runtime wrote nested 150 deep (the core allows 1000; Ruby's
# writer refuses more than 100): every reader hands them out. JSON.parse's
# default max_nesting (100) raised JSON::NestingError at each of them before.
class TestDeepValues < Minitest::Test
  include TocsinTest

  DEPTH = 150

  def deep_json(n = DEPTH) = "#{"[" * n}\"leaf\"#{"]" * n}"

  def depth(v)
    n = 0
    while v.is_a?(Array)
      n += 1
      v = v[0]
    end
    assert_equal "leaf", v
    n
  end

  def test_jobs_events_notifications_and_results_nested_150_deep_are_read
    q = db.queue("q")
    id = db.native.enqueue("q", deep_json, nil)
    assert_equal DEPTH, depth(q.get(id).payload)
    job = q.claim("w")
    assert_equal DEPTH, depth(job.payload)
    job.ack

    db.native.publish("s", deep_json, nil, nil)
    assert_equal DEPTH, depth(db.stream("s").read.first.payload)
    got = nil
    db.stream("s").subscribe(consumer: "c", timeout: 0.2) { |e| got = e.payload }
    assert_equal DEPTH, depth(got)
    assert_equal 1, db.stream("s").offset("c"), "the consumer moved past the event"

    db.native.notify("n", deep_json, nil)
    assert_equal DEPTH, depth(db.notifications("n").first.payload)

    db.native.result_save(id, deep_json, nil)
    assert_equal DEPTH, depth(db.result(id).value)
  end

  def test_a_worker_runs_a_task_whose_arguments_nest_150_deep
    tasks = { "depth" => Tocsin::Task.new("depth", ->(v) { depth(v) }, queue: "w", retries: 0) }
    w = Tocsin::Worker.new(db, tasks: tasks, scheduler: false)
    runner = Thread.new { w.run }
    id = db.native.task_enqueue("w", "depth", "[#{deep_json}]", "{}", nil, nil, nil)
    assert_equal DEPTH, Tocsin::TaskHandle.new(db, id).value(timeout: 30)
  ensure
    w&.stop
    runner&.join
  end
end
