# frozen_string_literal: true

# The gem carries the C core: in the repository checkout, building the gem copies
# ../../core (include/, src/) and ../../VERSION into ext/tocsin/core first.
require "fileutils"
require_relative "lib/tocsin/version"

here = __dir__
repo_core = File.expand_path("../../core", here)
if File.file?(File.join(repo_core, "src", "tocsin_all.c"))
  dst = File.join(here, "ext", "tocsin", "core")
  FileUtils.rm_rf(dst)
  %w[include src].each do |part|
    FileUtils.mkdir_p(File.join(dst, part))
    Dir[File.join(repo_core, part, "*.{c,h}")].each { |f| FileUtils.cp(f, File.join(dst, part)) }
  end
  FileUtils.cp(File.expand_path("../../VERSION", here), File.join(dst, "VERSION"))
end

Gem::Specification.new do |spec|
  spec.name = "tocsin"
  spec.version = Tocsin::VERSION
  spec.summary = "NOTIFY/LISTEN, durable job queues and durable streams for SQLite"
  spec.description = "tocsin gives applications whose data lives in SQLite transactional job queues, " \
                     "NOTIFY/LISTEN, durable streams, results, cron schedules, locks and rate limits, " \
                     "with workers in any language (a C core; this gem is its Ruby binding)."
  spec.authors = ["tocsin contributors"]
  spec.license = "MIT"
  spec.required_ruby_version = ">= 3.0"
  spec.files = Dir.chdir(here) do
    Dir["lib/**/*.rb", "exe/*", "ext/tocsin/*.{c,rb}", "ext/tocsin_sqlite/*.rb",
        "ext/tocsin/core/include/*.h", "ext/tocsin/core/src/*.{c,h}", "ext/tocsin/core/VERSION", "README.md", "LICENSE"]
  end
  spec.bindir = "exe"
  spec.executables = ["tocsin-worker"]
  spec.require_paths = ["lib"]
  spec.extensions = ["ext/tocsin/extconf.rb", "ext/tocsin_sqlite/extconf.rb"]
  spec.metadata["rubygems_mfa_required"] = "true"
end
