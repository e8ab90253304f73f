# frozen_string_literal: true

require_relative "test_helper"
require "sqlite3"
require "tocsin/sql"

# One process, one SQLite: the sqlite3 gem (Debian's, on the system libsqlite3)
# and tocsin on one file.
class TestSQLite3Gem < Minitest::Test
  include TocsinTest

  def test_one_copy_of_sqlite_in_this_process
    assert_nil Tocsin::Native.sqlite_copies
    Tocsin::OneSQLite.check!
    assert_equal ::SQLite3::Database.new(":memory:").get_first_value("select sqlite_version()"), Tocsin.sqlite_version
  end

  def test_gem_enqueues_in_its_own_transaction_and_a_tocsin_worker_claims
    conn = ::SQLite3::Database.new(@path)
    conn.busy_timeout = 5000
    Tocsin::SQL.load(conn)
    conn.execute("CREATE TABLE orders(id INTEGER PRIMARY KEY, total INTEGER)")
    envelope = db.task_envelope("receipt", 1, kwargs: { "total" => 990 })
    job_id = nil
    conn.transaction do
      conn.execute("INSERT INTO orders(total) VALUES (990)")
      job_id = Tocsin::SQL.enqueue_envelope(conn, "emails", envelope)
      Tocsin::SQL.notify(conn, "orders", { id: 1 })
    end
    begin
      conn.transaction do
        conn.execute("INSERT INTO orders(total) VALUES (5)")
        Tocsin::SQL.enqueue(conn, "emails", { order: 2 }, priority: 9)
        raise "declined"
      end
    rescue RuntimeError
      nil
    end
    assert_equal 1, conn.get_first_value("SELECT count(*) FROM orders")
    assert_equal 1, db.queue("emails").stats["pending"], "the rolled-back job is gone"

    got = ::Queue.new
    reg = { "receipt" => Tocsin::Task.new("receipt", ->(id, total:) { got << [id, total]; "sent #{id}" }, queue: "emails") }
    w = Tocsin::Worker.new(db, tasks: reg, scheduler: false)
    th = Thread.new { w.run }
    assert_equal [1, 990], got.pop
    w.stop
    th.join(10)
    assert_equal "sent 1", db.wait_result(job_id, timeout: 10).value
    assert_equal({ "status" => "ok", "value" => "sent 1" },
                 JSON.parse(conn.get_first_value("SELECT tocsin_result_get(?)", [job_id])).slice("status", "value"))
    assert_equal 1, db.notifications("orders").size
    conn.close
  end

  # A task call by name in the gem's own transaction, as Python's tocsin.call(conn, ...),
  # Node's callSql and Go's CallTx make it (no Tocsin::Database needed for the envelope).
  def test_sql_call_enqueues_a_task_call_in_the_gems_transaction
    conn = ::SQLite3::Database.new(@path)
    conn.busy_timeout = 5000
    Tocsin::SQL.load(conn)
    begin
      conn.transaction do
        Tocsin::SQL.call(conn, "emails", "receipt", 7, kwargs: { total: 1 })
        raise "declined"
      end
    rescue RuntimeError
      nil
    end
    assert_equal 0, db.queue("emails").stats["pending"], "the rolled-back call is gone"
    job_id = nil
    conn.transaction do
      job_id = Tocsin::SQL.call(conn, "emails", "receipt", 2, kwargs: { total: 990 }, result_ttl: 60, timeout: 5,
                                                                priority: 3, max_attempts: 2)
    end
    job = db.queue("emails").get(job_id)
    assert_equal({ "task" => "receipt", "args" => [2], "kwargs" => { "total" => 990 }, "result_ttl_ms" => 60_000,
                   "timeout_ms" => 5000 }, job.payload)
    assert_equal [3, 2], [job.priority, job.max_attempts]
    reg = { "receipt" => Tocsin::Task.new("receipt", ->(id, total:) { "sent #{id} #{total}" }, queue: "emails") }
    w = Tocsin::Worker.new(db, tasks: reg, scheduler: false)
    th = Thread.new { w.run }
    assert_equal "sent 2 990", db.wait_result(job_id, timeout: 10).value
    w.stop
    th.join(10)
    conn.transaction do
      assert_raises(Tocsin::InvalidArgument) { Tocsin::SQL.call(conn, "emails", "") }
      assert_raises(Tocsin::TooBig) { Tocsin::SQL.call(conn, "emails", "t", "x" * (2 << 20)) }
      assert_raises(Tocsin::InvalidArgument) { Tocsin::SQL.call(conn, "emails", "t", kwargs: [1]) }
    end
    conn.close
  end

  def test_a_second_copy_of_sqlite_is_refused
    # a copy of the system library under another name is a second SQLite, as a
    # sqlite3 gem that bundles its own would be
    copy = File.join(@dir, "libsqlite3-bundled.so")
    native = $LOADED_FEATURES.find { |f| f.end_with?("tocsin/tocsin_native.so") }
    system_lib = Open3.capture2("ldd", native)[0][/=>\s*(\S*libsqlite3\S*)/, 1]
    refute_nil system_lib, "tocsin's extension links the shared libsqlite3"
    FileUtils.cp(system_lib, copy)
    script = <<~RUBY
      require "fiddle"
      require "sqlite3"
      require "tocsin"
      require "tocsin/sql"
      lib = Fiddle.dlopen(#{copy.inspect})
      begin
        Tocsin.open(#{@path.inspect})
        puts "opened"
      rescue Tocsin::Error => e
        puts e.message
      end
      # the extension runs on the gem's SQLite: loading it is no second opener
      c = SQLite3::Database.new(#{@path.inspect})
      Tocsin::SQL.load(c)
      puts "loaded: " + Tocsin::SQL.enqueue(c, "q", 1).to_s
      c.close
      Tocsin.open(#{@path.inspect}, check_sqlite: false).close
      puts "allowed"
      lib.close
      Tocsin.open(#{@path.inspect}).close
      puts "unloaded: fine"
    RUBY
    out, err, st = Open3.capture3(*ruby_cmd("-e", script))
    assert st.success?, err
    assert_match(/a second copy of SQLite is loaded in this process/, out)
    assert_includes out, copy
    assert_match(/--enable-system-libraries/, out)
    refute_match(/^opened$/, out)
    assert_match(/^loaded: \d+$/, out)
    assert_equal ["allowed", "unloaded: fine"], out.lines.map(&:chomp).last(2)
  end
end

# What the gem's shared objects export: hosts load the extension with RTLD_GLOBAL.
class TestExports < Minitest::Test
  include TocsinTest

  def test_native_exports_its_init_only_and_the_extension_its_entry_point_only
    native = $LOADED_FEATURES.find { |f| f.end_with?("tocsin/tocsin_native.so") }
    check = File.join(ROOT, "tools", "check-exports")
    out, st = Open3.capture2e("sh", check, "only", native, "Init_tocsin_native")
    assert st.success?, out
    out, st = Open3.capture2e("sh", check, "only", Tocsin.loadable_path, "sqlite3_tocsin_init")
    assert st.success?, out
    out, = Open3.capture2e("ldd", Tocsin.loadable_path)
    refute_match(/libruby|libsqlite3/, out, "the loadable extension links neither Ruby nor SQLite")
  end
end
