# frozen_string_literal: true

# The Ruby peer of the crash suite and the soak: see py_peer.py for the modes and the
# log lines.  ruby -I<binding lib> rb_peer.rb MODE DB LOGDIR SEED
#
# The Ruby consumer works the crash queue with claim and ack: Tocsin::Worker has no
# transaction in which a task's writes and its ack commit together, so the consumer
# writes its effect row and acks with tx: in one db.transaction (the lease's fencing
# token refuses the ack, and rolls the effect back, once another worker holds the job).
require "json"
require "tocsin"

MODE, DB, LOGDIR, SEED = ARGV[0], ARGV[1], ARGV[2], Integer(ARGV[3])
RUNTIME = "ruby"
RNG = Random.new(SEED)
LOG = File.open(File.join(LOGDIR, "#{RUNTIME}-#{MODE}-#{Process.pid}.log"), "a")
LOG.sync = true

def log(line) = LOG.syswrite("#{line}\n")
def now_ms = (Time.now.to_f * 1000).to_i
def pause(lo, hi) = sleep(RNG.rand(lo..hi) / 1000.0)

$stop = false
Signal.trap("TERM") { $stop = true }

def consumer(db)
  q = db.queue("crash")
  wid = "ruby-consumer-#{Process.pid}"
  log("ready")
  until $stop
    job = q.claim(wid, visibility: 1.5)
    unless job
      pause(20, 60)
      next
    end
    log("run #{job.id} #{job.attempts}")
    pause(0, 15)
    kw = job.payload["kwargs"] || {}
    acked = begin
      db.transaction do |tx|
        tx.execute("INSERT INTO effects(job_id, runtime, pid, attempt, at) " \
                   "VALUES (#{job.id}, 'ruby', #{Process.pid}, #{job.attempts}, #{now_ms})")
        pause(0, 15) # a SIGKILL here lands inside the ack transaction
        # a refused ack raises out of the block: the effect rolls back with it
        raise Tocsin::LeaseLost, "lease lost" unless q.ack(job, tx: tx)

        true
      end
    rescue Tocsin::LeaseLost
      false
    end
    log(acked ? "acked #{job.id} n=#{kw["n"]}" : "refused #{job.id}")
  end
end

# The scenarios' Worker (py_peer.py's scen: the same task and reply in every runtime).
def scen(db)
  st = { running: 0, peak: 0, seq: 0 }
  mu = Mutex.new
  cap = Integer(ENV.fetch("SCEN_HOLD_CAP_MS", (1 << 30).to_s))
  hold = Tocsin.task("scen.hold", queue: "scen", retries: 9) do |ms|
    job = Tocsin.current_job
    seq = mu.synchronize do
      st[:seq] += 1
      st[:running] += 1
      st[:peak] = [st[:peak], st[:running]].max
      st[:seq]
    end
    log("run #{job.job_id} #{job.attempt}")
    begin
      sleep([ms, cap].min / 1000.0)
    ensure
      mu.synchronize { st[:running] -= 1 }
    end
    log("done #{job.job_id}")
    { "by" => RUNTIME, "pid" => Process.pid, "attempt" => job.attempt, "max_attempts" => job.max_attempts,
      "seq" => seq, "peak" => st[:peak] }
  end
  w = Tocsin::Worker.new(db, queues: ["scen"], concurrency: Integer(ENV.fetch("SCEN_CONCURRENCY", "2")),
                             visibility: 3, shutdown_timeout: Integer(ENV.fetch("SCEN_SHUTDOWN_MS", "500")) / 1000.0,
                             scheduler: true, scheduler_ttl: 1.5, tasks: { "scen.hold" => hold })
  log("ready")
  w.run(trap_signals: true)
end

# The unique-key scenario's producer: once LOGDIR/scen-go exists, calls scen.hold with
# unique key SCEN_KEY, logs "id N" and exits.
def scen_enqueue(db)
  log("ready")
  sleep(0.001) until File.exist?(File.join(LOGDIR, "scen-go"))
  h = db.queue("scen").call("scen.hold", Integer(ENV.fetch("SCEN_HOLD_MS", "0")), unique_key: ENV.fetch("SCEN_KEY"),
                                                                               max_attempts: 1)
  log("id #{h.job_id}")
end

def producer(db)
  q = db.queue("crash")
  seq = 0
  log("ready")
  until $stop
    log("begin")
    db.transaction do |tx|
      RNG.rand(1..3).times do
        seq += 1
        h = q.call("crash.effect", kwargs: { n: seq, p: RUNTIME }, max_attempts: 25, tx: tx)
        tx.execute("INSERT INTO intents(job_id, producer, pid, at) VALUES (#{h.job_id}, 'ruby', #{Process.pid}, #{now_ms})")
      end
      pause(0, 10) # a SIGKILL here commits nothing
    end
    log("commit")
    pause(20, 60)
  end
end

db = Tocsin.open(DB)
case MODE
when "consumer" then consumer(db)
when "producer" then producer(db)
when "scen" then scen(db)
when "scen-enqueue" then scen_enqueue(db)
else
  require_relative "rb_soak"
  soak(db, MODE)
end
db.close
