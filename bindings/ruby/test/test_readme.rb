# frozen_string_literal: true

require_relative "test_helper"

# bindings/ruby/README.md: its ```ruby blocks run, in order, in a fresh folder.
class TestReadme < Minitest::Test
  include TocsinTest

  def test_readme_quickstart_runs
    text = File.read(File.join(BINDING, "README.md"))
    blocks = text.scan(/^```ruby\n(.*?)^```$/m).flatten
    assert_operator blocks.size, :>=, 2
    blocks.each_with_index do |code, i|
      out, st = Open3.capture2e(*ruby_cmd("-e", code), chdir: @dir)
      assert st.success?, "README block #{i + 1} failed:\n#{out}"
      @out = (@out || "") + out
    end
    assert_includes @out, "sending ann@example.com"
    assert_includes @out, "bill order 1"
    assert_includes @out, "add -> 30"
  end
end
