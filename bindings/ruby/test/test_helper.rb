# frozen_string_literal: true

require "minitest/autorun"
require "tmpdir"
require "fileutils"
require "rbconfig"
require "open3"
require "tocsin"

Thread.report_on_exception = false

module TocsinTest
  ROOT = File.expand_path("../../..", __dir__)
  BINDING = File.expand_path("..", __dir__)
  RUBY_LIB = ENV.fetch("TOCSIN_RUBY_LIB", File.join(ROOT, "build", "ruby", "lib"))
  BUILD = ENV.fetch("TOCSIN_BUILD", File.join(ROOT, "build"))

  def setup
    @dir = Dir.mktmpdir("tocsin-rb")
    @path = File.join(@dir, "app.db")
    super
  end

  def teardown
    super
    @db&.close
    FileUtils.rm_rf(@dir)
  end

  def db = (@db ||= Tocsin.open(@path))

  # A Ruby subprocess with this checkout's tocsin on its load path.
  def ruby_cmd(*args) = [RbConfig.ruby, "-I#{File.join(BINDING, "lib")}", "-I#{RUBY_LIB}", *args]

  def worker_cmd(*args) = ruby_cmd(File.join(BINDING, "exe", "tocsin-worker"), *args)

  def python
    py = File.join(BUILD, "venv", "bin", "python")
    skip "no Python venv (make python-venv)" unless File.executable?(py)
    py
  end
end

# The fixture of the argument tests: a database with a claimed job, a pending one,
# an event and a notification; after each test, whatever a refused call could have
# written must be as the setup left it. A class adds what it needs in #fixture.
module RefusalFixture
  include TocsinTest

  def snapshot
    [db.stats, db.stream("s").read(limit: 1000).size, db.notifications("c").size, db.schedules.size,
     db.result(@job.id), db.stream("s").offset("c"), db.lock_holder("l"), db.queue("q").dead_letters.size]
  end

  def fixture; end

  def setup
    super
    db.set_time(1_700_000_000_000) # stats' ages stay put
    q = db.queue("q")
    q.enqueue("a")
    @job = q.claim("w")
    fixture
    @before = snapshot
  end

  def teardown
    assert_equal @before, snapshot, "a refused call wrote something" if @before && !@db&.closed?
    super
  end
end
