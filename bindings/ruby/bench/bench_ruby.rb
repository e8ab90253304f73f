# frozen_string_literal: true

# Ruby binding benchmark (make bench-ruby): single-job enqueue and claim+ack through
# tocsin, beside raw SQL doing the same work through the sqlite3 gem (same run, same
# kind of file: WAL, synchronous=NORMAL) and the C core's figures (bench_core, run
# here too). Prints jobs/s and the ratios; targets: >= 0.70 of C, >= 0.85 of raw.
#
#   ruby bench/bench_ruby.rb [--n 5000] [--bench-core PATH]
require "json"
require "tmpdir"
require "optparse"
require "open3"
require "sqlite3"
require "tocsin"

n = 5000
bench_core = nil
OptionParser.new do |o|
  o.on("--n N", Integer) { |v| n = v }
  o.on("--bench-core PATH") { |v| bench_core = v }
end.parse!(ARGV)

RAW_SCHEMA = <<~SQL
  CREATE TABLE jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending', payload TEXT NOT NULL, priority INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0, run_at INTEGER NOT NULL, created_at INTEGER NOT NULL,
    lease_until INTEGER, worker TEXT);
  CREATE INDEX jobs_claim ON jobs(queue, priority DESC, run_at, id) WHERE state = 'pending';
SQL
RAW_INSERT = "INSERT INTO jobs(queue, payload, run_at, created_at) VALUES (?, ?, ?, ?)"
RAW_CLAIM = <<~SQL
  UPDATE jobs SET state = 'processing', attempts = attempts + 1, worker = ?,
    lease_until = ? WHERE id IN (SELECT id FROM jobs WHERE queue = ? AND state = 'pending'
    AND run_at <= ? ORDER BY priority DESC, run_at, id LIMIT ?) RETURNING id, attempts, payload
SQL
RAW_ACK = "DELETE FROM jobs WHERE id = ? AND attempts = ? AND state = 'processing'"
PAYLOAD = { "to" => "ada@example.org", "template" => "welcome", "n" => 1 }.freeze
ROUNDS = 5

def now_ms = Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond)

def raw_conn(path)
  c = SQLite3::Database.new(path)
  c.execute("PRAGMA journal_mode=WAL")
  c.execute("PRAGMA synchronous=NORMAL")
  c.busy_timeout = 5000
  c.execute_batch(RAW_SCHEMA)
  c
end

def rate(n)
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  yield
  n / (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t)
end

dir = Dir.mktmpdir("tocsin-bench-rb")
results = {}
begin
  # ---- enqueue, 1 per transaction (the payload serialised each time, as an app does)
  raw_best = 0.0
  toc_best = 0.0
  ROUNDS.times do |r|
    c = raw_conn(File.join(dir, "raw-enq-#{r}.db"))
    ins = c.prepare(RAW_INSERT)
    raw_best = [raw_best, rate(n) { n.times { t = now_ms; ins.execute("bench", JSON.generate(PAYLOAD), t, t) } }].max
    ins.close
    c.close
    Tocsin.open(File.join(dir, "toc-enq-#{r}.db")) do |db|
      q = db.queue("bench")
      toc_best = [toc_best, rate(n) { n.times { q.enqueue(PAYLOAD) } }].max
    end
  end
  results[:enqueue] = [toc_best, raw_best]

  # ---- claim 1 + ack 1, each its own transaction (payload parsed, as a worker does)
  raw_best = 0.0
  toc_best = 0.0
  ROUNDS.times do |r|
    c = raw_conn(File.join(dir, "raw-ca-#{r}.db"))
    c.transaction { t = now_ms; n.times { c.execute(RAW_INSERT, ["bench", JSON.generate(PAYLOAD), t, t]) } }
    claim = c.prepare(RAW_CLAIM)
    ack = c.prepare(RAW_ACK)
    raw_best = [raw_best, rate(n) do
      n.times do
        t = now_ms
        id, att, payload = claim.execute("w1", t + 30_000, "bench", t, 1).next
        JSON.parse(payload)
        ack.execute(id, att)
      end
    end].max
    claim.close
    ack.close
    c.close
    Tocsin.open(File.join(dir, "toc-ca-#{r}.db")) do |db|
      q = db.queue("bench")
      q.enqueue_many(Array.new(n) { PAYLOAD })
      toc_best = [toc_best, rate(n) do
        n.times do
          job = q.claim("w1")
          job.payload
          job.ack
        end
      end].max
    end
  end
  results[:claim_ack] = [toc_best, raw_best]
ensure
  FileUtils.rm_rf(dir)
end

c_figures = {}
if bench_core && File.executable?(bench_core)
  { enqueue: ["enqueue1", "enqueue, 1 per transaction"],
    claim_ack: ["claimack1", "claim 1 + ack 1 (each its own tx)"] }.each do |k, (key, row)|
    out, = Open3.capture3(bench_core, "--ops", n.to_s, "--reps", "3", "--only", key)
    line = out.lines.find { |l| l.start_with?(row) }
    c_figures[k] = line.split[-2].to_f if line
  end
end

puts "tocsin Ruby binding #{Tocsin::VERSION} (Ruby #{RUBY_VERSION}, SQLite #{Tocsin.sqlite_version}); " \
     "#{n} jobs per round, best of #{ROUNDS}"
puts format("%-36s %12s %12s %12s %9s %9s", "scenario", "ruby jobs/s", "raw gem/s", "C jobs/s", "ruby/raw",
            "ruby/C")
{ enqueue: "enqueue, 1 per transaction", claim_ack: "claim 1 + ack 1 (each its own tx)" }.each do |k, name|
  ruby, raw = results[k]
  cf = c_figures[k]
  puts format("%-36s %12.0f %12.0f %12s %9.2f %9s", name, ruby, raw, cf ? format("%.0f", cf) : "-", ruby / raw,
              cf ? format("%.2f", ruby / cf) : "-")
end
puts "targets: ruby/raw >= 0.85, ruby/C >= 0.70"
