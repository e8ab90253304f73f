# frozen_string_literal: true

# The Ruby part of the demo: tasks a Ruby worker runs for any runtime.
Tocsin.task("invoice", queue: "billing") do |order_id, total:|
  { "invoice" => "INV-#{order_id}", "total" => total, "by" => "ruby #{RUBY_VERSION}" }
end
Tocsin.every("@every 1s", "heartbeat")
Tocsin.task("heartbeat", queue: "billing") { "alive" }
