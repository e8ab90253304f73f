# frozen_string_literal: true

# The golden databases of interop-tests/golden, read through the Ruby API: a copy
# of each file the manifest names, its facts checked, then new work on it.
require_relative "test_helper"
require "json"

class TestGolden < Minitest::Test
  include TocsinTest

  GOLDEN = File.join(TocsinTest::ROOT, "interop-tests", "golden")
  MANIFEST = JSON.parse(File.read(File.join(GOLDEN, "manifest.json")))
  FILES = MANIFEST["files"].keys.sort

  def js(text) = text.nil? ? nil : JSON.parse(text)

  def same(want, got, msg = nil) = want.nil? ? assert_nil(got, msg) : assert_equal(want, got, msg)

  def golden_copy(name)
    dst = File.join(@dir, name)
    FileUtils.cp(File.join(GOLDEN, name), dst)
    dst
  end

  def test_manifest_names_files
    assert_includes FILES, "v1-full.db"
    assert_operator FILES.size, :>=, 2
    FILES.each { |f| assert File.exist?(File.join(GOLDEN, f)), f }
  end

  FILES.each do |name|
    tag = name.tr(".-", "__")

    define_method("test_facts_#{tag}") do
      m = MANIFEST["files"][name]
      d = Tocsin.open(golden_copy(name))
      begin
        m["queues"].each do |q, want|
          st = d.queue(q).stats
          %w[pending scheduled processing dead].each { |k| assert_equal want[k], st[k], "#{q} #{k}" }
          assert_equal want["paused"] != 0, st["paused"] ? true : false
        end
        m["jobs"].each do |j|
          job = d.queue(j["queue"]).get(j["id"])
          refute_nil job, "job #{j["id"]}"
          assert_equal [j["queue"], j["state"], j["payload"], j["meta"]], [job.queue_name, job.state, job.payload, job.meta]
          assert_equal [j["priority"], j["attempts"], j["max_attempts"], j["run_at"]],
                       [job.priority, job.attempts, job.max_attempts, job.run_at]
          assert_equal [j["unique_key"], j["worker"]], [job.unique_key, job.worker]
        end
        dead = {}
        m["dead"].map { |x| x["queue"] }.uniq.each do |q|
          d.queue(q).dead_letters(limit: 1000).each { |job| dead[job.id] = job }
        end
        assert_equal m["dead"].map { |x| x["id"] }, dead.keys.sort
        m["dead"].each do |x|
          job = dead[x["id"]]
          assert_equal ["dead", x["reason"], x["last_error"], x["payload"], x["attempts"]],
                       [job.state, job.reason, job.last_error, job.payload, job.attempts]
        end
        m["results"].each do |r|
          res = d.result(r["job_id"])
          refute_nil res, "result #{r["job_id"]}"
          assert_equal r["status"] == "error", res.error? ? true : false
          same js(r["value"]), res.value unless res.error?
          assert_equal [r["error_type"], r["error_message"], r["error_trace"]],
                       [res.error_type, res.error_message, res.error_trace]
          assert_equal 0, res.expires_at
        end
        m["streams"].each do |s|
          st = d.stream(s["topic"])
          assert_equal(s["events"].map { |e| [e["offset"], e["key"], e["payload"], e["meta"]] },
                       st.read(after: 0, limit: 1000).map { |e| [e.offset, e.key, e.payload, e.meta] })
          s["consumers"].each do |consumer, pos|
            assert_equal pos, st.offset(consumer)
            assert_equal(s["events"].map { |e| e["offset"] }.select { |o| o > pos },
                         st.read(after: pos, limit: 1000).map(&:offset))
          end
        end
        assert_equal m["max_notification_id"], d.notify_max_id
        m["notifications"].each do |n|
          got = d.notifications(n["channel"], after: n["id"] - 1, limit: 1)
          assert_equal [[n["id"], n["payload"], n["meta"]]], got.map { |x| [x.id, x.payload, x.meta] }
        end
        m["locks"].each do |lk|
          owner, token, = d.lock_holder(lk["name"])
          assert_nil owner
          assert_equal lk["token"], token
        end
        scheds = d.schedules
        assert_equal(m["schedules"].map { |s| s["name"] }, scheds.map(&:name))
        scheds.zip(m["schedules"]).each do |got, want|
          assert_equal [want["cron"], want["queue"], want["priority"], want["max_attempts"], want["max_catch_up"]],
                       [got.cron, got.queue, got.priority, got.max_attempts, got.max_catch_up]
          assert_equal want["payload"], got.payload_value
          same want["meta"], got.meta.is_a?(String) ? js(got.meta) : got.meta
          assert_includes [want["catch_up"], want["catch_up"] == "all" ? 1 : 0, want["catch_up"].to_sym], got.catch_up
          assert_equal want["paused"] != 0, got.paused? ? true : false
          assert_equal want["next_fire"], got.next_fire
        end
      ensure
        d.close
      end
    end

    define_method("test_new_work_#{tag}") do
      m = MANIFEST["files"][name]
      file = golden_copy(name)
      d = Tocsin.open(file)
      begin
        max_id = (m["jobs"].map { |j| j["id"] } + m["dead"].map { |x| x["id"] } + [0]).max
        emails = d.queue("emails")
        id = emails.enqueue({ "to" => "rb@example.com" }, priority: 100)
        assert_operator id, :>, max_id
        pending = (m["queues"]["emails"] || { "pending" => 0 })["pending"]
        jobs = emails.claim_batch(100, "rb-golden")
        assert_equal pending + 1, jobs.size
        assert_equal id, jobs.first.id
        jobs.each { |job| assert job.ack }
        unless m["dead"].empty?
          x = m["dead"].first
          q = d.queue(x["queue"])
          assert q.requeue(x["id"])
          job = q.claim("rb-golden")
          assert_equal x["id"], job.id
          assert job.ack
        end
        m["locks"].each do |lk|
          lock = d.lock(lk["name"], ttl: 60, owner: "rb-golden")
          assert lock.try_acquire
          assert_equal lk["token"] + 1, lock.token
          assert lock.release
        end
        off = d.stream("orders").publish({ "order" => "rb" })
        m["streams"].each { |s| assert_operator off, :>, s["last_offset"] }
        assert_operator d.notify("chat", { "text" => "rb" }), :>, m["max_notification_id"]
        want = m["schedules"].count { |s| s["paused"].zero? && s["catch_up"] == "once" }
        assert_equal want, d.scheduler_tick
      ensure
        d.close
      end
      again = Tocsin.open(file)
      assert_equal 0, again.queue("emails").stats["pending"]
      again.close
    end
  end
end
