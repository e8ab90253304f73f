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
