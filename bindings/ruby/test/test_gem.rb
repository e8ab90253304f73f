# frozen_string_literal: true

require_relative "test_helper"
require "rubygems/package"

# The packed artefact: gem build, then gem install --local into a clean GEM_HOME,
# then use it from there (no checkout on the load path).
class TestGem < Minitest::Test
  include TocsinTest

  def test_gem_build_and_install_into_a_clean_gem_home
    gem = File.join(@dir, "tocsin.gem")
    out, st = Open3.capture2e("gem", "build", "tocsin.gemspec", "--output", gem, chdir: BINDING)
    assert st.success?, out
    spec = Gem::Package.new(gem).spec
    assert_includes spec.files, "ext/tocsin/core/src/tocsin_all.c"
    assert_includes spec.files, "ext/tocsin/core/include/tocsin.h"
    assert_equal Tocsin::VERSION, spec.version.to_s

    home = File.join(@dir, "gems")
    env = { "GEM_HOME" => home, "GEM_PATH" => home, "RUBYLIB" => nil, "RUBYOPT" => nil }
    out, st = Open3.capture2e(env, "gem", "install", "--local", "--no-document", gem, chdir: @dir)
    assert st.success?, out
    script = <<~RUBY
      require "tocsin"
      native = $LOADED_FEATURES.grep(/tocsin_native/).first
      abort "not from the gem home: \#{native}" unless native.start_with?(#{home.inspect})
      Tocsin.open(#{@path.inspect}) do |db|
        db.queue("q").enqueue({ "n" => 1 })
        puts db.queue("q").claim("w").payload["n"]
      end
      require "sqlite3"
      require "tocsin/sql"
      c = SQLite3::Database.new(#{@path.inspect})
      Tocsin::SQL.load(c)
      puts c.get_first_value("SELECT tocsin_version()")
    RUBY
    out, st = Open3.capture2e(env, RbConfig.ruby, "-e", script, chdir: @dir)
    assert st.success?, out
    assert_equal ["1", Tocsin::VERSION], out.split
    out, st = Open3.capture2e(env, File.join(home, "bin", "tocsin-worker"), "--version", chdir: @dir)
    assert st.success?, out
    assert_match(/tocsin #{Regexp.escape(Tocsin::VERSION)}/, out)
  end
end
