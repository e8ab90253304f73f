# frozen_string_literal: true

# make test-ruby: every test/test_*.rb; fails when no test ran.
Dir[File.join(__dir__, "test_*.rb")].sort.each { |f| require f }
Minitest.after_run do
  n = Minitest::Runnable.runnables.sum { |r| r.runnable_methods.size }
  if n.zero?
    warn "test-ruby: no tests found"
    exit! 1
  end
end
