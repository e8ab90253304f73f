# frozen_string_literal: true

module Tocsin
  # Kept equal to the repository's VERSION file (the gemspec reads it; a test checks).
  VERSION = "0.1.0"
end
