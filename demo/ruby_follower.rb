# frozen_string_literal: true

# The Ruby consumer of `make demo`: follows the "orders" stream as consumer
# "shipping" (replay from its saved offset, then live) until it has seen N orders,
# and writes what it saw to OUT.  ruby ruby_follower.rb DB N OUT
require "json"
require "tocsin"

db_path, want, out = ARGV[0], Integer(ARGV[1]), ARGV[2]
seen = []
Tocsin.open(db_path) do |db|
  puts "ruby (pid #{Process.pid}): following the orders stream as \"shipping\""
  $stdout.flush
  db.stream("orders").subscribe(consumer: "shipping", timeout: 20) do |event|
    next unless event.payload.is_a?(Hash) && event.payload["order"] # the C shop's events too

    seen << event.payload["order"]
    puts "ruby (pid #{Process.pid}): ship order #{event.payload["order"]} (#{event.payload["item"]}), offset #{event.offset}"
    $stdout.flush
    break if seen.size >= want
  end
end
abort "ruby: saw #{seen.size} of #{want} orders" if seen.size < want
File.write(out, JSON.generate({ "runtime" => "ruby", "pid" => Process.pid, "orders" => seen }))
