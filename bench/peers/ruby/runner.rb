# frozen_string_literal: true

# One measurement for bench/run.py: ruby runner.rb IMPL WORKLOAD --dir DIR [--n N]
# IMPL: tocsin (the Ruby binding) | raw (the sqlite3 gem, the SQL of a minimal queue).
# Every file: WAL, synchronous=NORMAL, the same JSON payload. Prints one JSON object.
require "json"
require "optparse"

impl, workload = ARGV.shift(2)
opt = { n: 5000 }
OptionParser.new do |o|
  o.on("--dir D") { |v| opt[:dir] = v }
  o.on("--n N", Integer) { |v| opt[:n] = v }
  o.on("--seconds S") {}
  o.on("--backlog B") {}
end.parse!(ARGV)
n = opt[:n]
PAYLOAD = { "to" => "ada@example.org", "template" => "welcome", "n" => 1 }.freeze
path = File.join(opt[:dir], "#{workload}.db")

Sys = Struct.new(:enqueue, :enqueue100, :claim_ack, :claim_ack100, :fill)

def now_ms = Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond)

def open_impl(impl, path)
  case impl
  when "tocsin"
    require "tocsin"
    db = Tocsin.open(path)
    q = db.queue("bench")
    Sys.new(
      -> { q.enqueue(PAYLOAD) },
      ->(ps) { q.enqueue_many(ps) },
      lambda {
        j = q.claim("w1")
        next false unless j
        j.payload
        j.ack
        true
      },
      lambda {
        js = q.claim_batch(100, "w1")
        js.each(&:payload)
        q.ack_batch(js)
        js.size
      },
      ->(k) { (0...k).step(1000) { |i| q.enqueue_many(Array.new([1000, k - i].min) { PAYLOAD }) } }
    )
  when "raw"
    require "sqlite3"
    c = SQLite3::Database.new(path)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=NORMAL")
    c.busy_timeout = 10_000
    c.execute_batch(<<~SQL)
      CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY, queue TEXT NOT NULL,
        payload TEXT NOT NULL, ready INTEGER NOT NULL DEFAULT 1, lease_until INTEGER, worker TEXT);
      CREATE INDEX IF NOT EXISTS jobs_ready ON jobs(queue, id) WHERE ready = 1;
    SQL
    ins = c.prepare("INSERT INTO jobs(queue, payload) VALUES (?, ?)")
    claim = c.prepare("UPDATE jobs SET ready = 0, lease_until = ?, worker = ? WHERE id IN " \
                      "(SELECT id FROM jobs WHERE queue = ? AND ready = 1 ORDER BY id LIMIT ?) RETURNING id, payload")
    del = c.prepare("DELETE FROM jobs WHERE id = ?")
    many = ->(ps) { c.transaction(:immediate) { ps.each { |p| ins.execute("bench", JSON.generate(p)) } } }
    claim_n = lambda { |k|
      rows = nil
      c.transaction(:immediate) { rows = claim.execute(now_ms + 30_000, "w1", "bench", k).to_a }
      rows.each { |r| JSON.parse(r[1]) }
      rows
    }
    Sys.new(
      -> { ins.execute("bench", JSON.generate(PAYLOAD)) },
      many,
      lambda {
        r = claim_n.call(1).first
        next false unless r
        del.execute(r[0])
        true
      },
      lambda {
        rows = claim_n.call(100)
        c.transaction(:immediate) { rows.each { |r| del.execute(r[0]) } }
        rows.size
      },
      ->(k) { (0...k).step(1000) { |i| many.call(Array.new([1000, k - i].min) { PAYLOAD }) } }
    )
  else
    abort "unknown impl #{impl}"
  end
end

def rate(n)
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  yield
  n / (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t)
end

# the worker runner: 2 tocsin-worker processes x 4 concurrency, no-op tasks
if workload == "worker"
  require "tocsin"
  require "rbconfig"
  file = File.join(opt[:dir], "worker.db")
  app = File.join(opt[:dir], "tasks.rb")
  File.write(app, "Tocsin.task(\"noop\", queue: \"bench\") { nil }\n")
  exe = File.expand_path("../../../bindings/ruby/exe/tocsin-worker", __dir__)
  db = Tocsin.open(file)
  q = db.queue("bench")
  inc = $LOAD_PATH.grep(/bindings|ruby/).flat_map { |d| ["-I", d] }
  pids = Array.new(2) do
    Process.spawn(RbConfig.ruby, *inc, exe, "--db", file, "--require", app, "--queue", "bench",
                  "--concurrency", "4", "--no-scheduler", out: File::NULL)
  end
  begin
    require "sqlite3"
    ro = SQLite3::Database.new(file, readonly: true)
    ro.busy_timeout = 10_000
    count = ->(sql) { ro.get_first_value(sql) }
    deadline = Time.now + 60
    sleep 0.05 while count.call("SELECT count(*) FROM _tocsin_workers") < 2 && Time.now < deadline
    abort "the workers did not start" if count.call("SELECT count(*) FROM _tocsin_workers") < 2
    db.transaction { |tx| n.times { q.call("noop", tx: tx) } }
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    deadline = Time.now + 120
    sleep 0.002 while count.call("SELECT EXISTS (SELECT 1 FROM _tocsin_jobs)").positive? && Time.now < deadline
    abort "the workers did not finish" if count.call("SELECT EXISTS (SELECT 1 FROM _tocsin_jobs)").positive?
    r = n / (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0)
  ensure
    pids.each { |p| Process.kill("TERM", p) rescue nil }
    pids.each { |p| Process.wait(p) rescue nil }
  end
  puts JSON.generate({ "metrics" => { "tasks_s" => r }, "samples" => {} })
  exit 0
end

s = open_impl(impl, path)
rounds = [n / 100, 1].max
batch = Array.new(100) { PAYLOAD }
m = case workload
    when "enq1" then rate(n) { n.times { s.enqueue.call } }
    when "enq100" then rate(rounds * 100) { rounds.times { s.enqueue100.call(batch) } }
    when "ca1"
      s.fill.call(n)
      rate(n) { n.times { s.claim_ack.call || abort("queue ran dry") } }
    when "ca100"
      s.fill.call(rounds * 100)
      rate(rounds * 100) { rounds.times { s.claim_ack100.call == 100 || abort("short batch") } }
    else abort "unknown workload #{workload}"
    end
puts JSON.generate({ "metrics" => { "ops_s" => m }, "samples" => {} })
