# frozen_string_literal: true

# The Ruby agent of the interop matrix (protocol: interop-tests/README.md), run with
# GEM_HOME pointing at the clean gem home the .gem was installed into.
require "json"
require "sqlite3"
require "tocsin"
require "tocsin/sql"

RT = "ruby"

# the agent's own parse of command fields: values nested to the core's bound (1000)
def jparse(text) = JSON.parse(text, max_nesting: false)

class Agent
  def initialize
    @db = nil
    @locks = {}
  end

  def hello
    { runtime: RT, version: RUBY_VERSION, module: Gem.loaded_specs["tocsin"]&.full_gem_path,
      native: $LOADED_FEATURES.find { |f| f.end_with?("tocsin_native.so") },
      loadable: Tocsin.loadable_path, sqlite3_gem: $LOADED_FEATURES.find { |f| f.end_with?("sqlite3.rb") },
      bigint: true }
  end

  def open(path)
    close
    @db = Tocsin.open(path)
    {}
  end

  def close
    worker_stop
    @sub&.close
    @listener&.close
    @sub = @listener = nil
    @locks = {}
    @db&.close
    @db = nil
    {}
  end

  def enqueue(queue, payload, meta)
    { id: @db.queue(queue).enqueue(jparse(payload), meta: jparse(meta), max_attempts: 1) }
  end

  def claim_ack(queue)
    reply = nil
    @db.queue(queue).each_job("rb-consumer", timeout: 60) do |job| # waits (no GVL) for a job
      reply = { payload: job.payload, meta: job.meta, acked: job.ack }
      break
    end
    reply or raise "no job claimed"
  end

  def job(id)
    j = @db.queue("jobs").get(Integer(id))
    { state: j&.state }
  end

  def worker_start(queue)
    tasks = {
      "echo" => Tocsin.task("echo", queue: queue, retries: 0, backoff: 0.01) { |x| { "by" => RT, "echo" => x } },
      "boom" => Tocsin.task("boom", queue: queue, retries: 0, backoff: 0.01) { |x| raise ArgumentError, "boom: #{x}" }
    }
    @worker = Tocsin::Worker.new(@db, queues: [queue], scheduler: true, shutdown_timeout: 2, tasks: tasks)
    @thread = Thread.new { @worker.run }
    {}
  end

  def worker_stop
    if @worker
      @worker.stop
      @thread.join
      @worker = @thread = nil
    end
    {}
  end

  def call(queue, task, args)
    { id: @db.queue(queue).call(task, *jparse(args), max_attempts: 1).job_id }
  end

  def result(id)
    r = @db.wait_result(Integer(id), timeout: 60)
    r.error? ? { error: { type: r.error_type, message: r.error_message } } : { value: r.value }
  end

  def publish(topic, payload) = { offset: @db.stream(topic).publish(jparse(payload)) }

  def sub_start(topic, consumer)
    @sub = @db.stream(topic).subscribe(consumer: consumer, batch: 1)
    {}
  end

  def sub_next(n)
    events = []
    events.concat(@sub.next_batch(timeout: 60)) while events.size < Integer(n)
    { events: events.map { |e| { offset: e.offset, payload: e.payload } } }
  end

  def sub_stop
    @sub.save
    @sub.close
    @sub = nil
    {}
  end

  def offset(topic, consumer) = { offset: @db.stream(topic).offset(consumer) }

  def listen_start(channel)
    @listener = @db.listen(channel)
    {}
  end

  def listen_next = { payload: @listener.next_batch(timeout: 60).first.payload }

  def listen_stop
    @listener.close
    @listener = nil
    {}
  end

  def notify(channel, payload) = { id: @db.notify(channel, jparse(payload)) }

  def lock_for(name, owner, ttl_ms) = (@locks[[name, owner]] ||= @db.lock(name, ttl: Integer(ttl_ms) / 1000.0, owner: owner))

  def lock_try(name, owner, ttl_ms)
    l = lock_for(name, owner, ttl_ms)
    { token: l.try_acquire ? l.token : 0 }
  end

  def lock_wait(name, owner, ttl_ms)
    l = lock_for(name, owner, ttl_ms)
    raise "lock not acquired" unless l.acquire(timeout: 60)

    { token: l.token }
  end

  def lock_renew(name, owner)
    { res: @locks[[name, owner]].renew }
  rescue Tocsin::InvalidArgument # "the lock is not held": this holding was fenced
    { res: false }
  end

  def lock_release(name, owner) = { res: @locks[[name, owner]].release }

  def schedule(name, cron, queue, payload) = { next_fire: @db.schedule(name, cron, queue: queue, payload: jparse(payload)) }
  def unschedule(name) = { res: @db.unschedule(name) }

  # The sqlite3 gem (Debian ruby-sqlite3): the app's own connection and transaction.
  def sql_conn(path)
    c = SQLite3::Database.new(path)
    c.busy_timeout = 10_000
    Tocsin::SQL.load(c)
    c.execute("CREATE TABLE IF NOT EXISTS orders(id INTEGER PRIMARY KEY, who TEXT)")
    c
  end

  def sql_call(path, queue, task, args, outcome)
    c = sql_conn(path)
    id = nil
    who = "sqlite3-gem #{outcome} #{queue}"
    c.transaction
    c.execute("INSERT INTO orders(who) VALUES (?)", [who])
    id = c.get_first_value("SELECT tocsin_task_enqueue(?, ?, ?, '{}', '{\"max_attempts\":1}')", [queue, task, args])
    outcome == "rollback" ? c.rollback : c.commit
    rows = c.get_first_value("SELECT count(*) FROM orders WHERE who = ?", [who])
    job = c.get_first_value("SELECT tocsin_job(?)", [id])
    { id: id, rows: rows, job: job && JSON.parse(job) }
  ensure
    c&.close
  end

  def sql_result(path, id)
    c = sql_conn(path)
    3000.times do
      r = c.get_first_value("SELECT tocsin_result_get(?)", [Integer(id)])
      return { result: JSON.parse(r) } if r

      sleep 0.02
    end
    raise "no result"
  ensure
    c&.close
  end

  def sql_claim_ack(path, queue, _id)
    c = sql_conn(path)
    3000.times do
      rows = JSON.parse(c.get_first_value("SELECT tocsin_claim(?, 'sqlite3-gem', 1, 30000)", [queue]))
      unless rows.empty?
        j = rows.first
        acked = c.get_first_value("SELECT tocsin_ack(?, ?)", [j["id"], j["token"]])
        return { id: j["id"], payload: j["payload"], acked: acked == 1 }
      end
      sleep 0.02
    end
    raise "nothing to claim"
  ensure
    c&.close
  end

  def quit = close
end

agent = Agent.new
$stdout.sync = true
$stdin.each_line do |line|
  op, *args = line.chomp.split("\t", -1)
  reply = begin
    agent.public_send(op, *args).merge(ok: true)
  rescue StandardError => e
    { ok: false, error: "#{e.class}: #{e.message}" }
  end
  $stdout.puts(JSON.generate(reply, max_nesting: false))
  break if op == "quit"
end
agent.close
