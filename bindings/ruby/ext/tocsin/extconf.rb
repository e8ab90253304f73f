# Builds tocsin/tocsin_native: the Ruby C-API extension with the C core compiled in
# (TOCSIN_EMBED: nothing of the core is exported), linked to the system's shared
# libsqlite3 (one SQLite per process, shared with Debian's sqlite3 gem).
#
# The core comes from ./core (copied there when the gem is built) or, in the
# repository checkout, from --with-tocsin-core=DIR.
require "mkmf"

core = with_config("tocsin-core") || File.join(__dir__, "core")
unless File.file?(File.join(core, "src", "tocsin_all.c"))
  abort "tocsin: the C core is missing (#{core}); build the gem with `gem build` from bindings/ruby " \
        "or pass --with-tocsin-core=DIR"
end
core = File.expand_path(core)

abort "tocsin: libsqlite3 (the system's shared SQLite, with its headers) is required" unless
  have_header("sqlite3.h") && have_library("sqlite3", "sqlite3_libversion_number")
have_library("pthread")
have_header("ruby/thread.h") or abort "tocsin: Ruby >= 2.0 headers needed"
have_func("rb_fiber_scheduler_current", "ruby/fiber/scheduler.h")

$INCFLAGS << " -I#{core}/include -I#{core}/src"
$CFLAGS << " -std=gnu11 -fvisibility=hidden -DTOCSIN_EMBED -Wall -Wno-unused-parameter"
$defs << "-DTOCSIN_CORE_DIR=\\\"#{core}\\\""
$VPATH << "#{core}/src"
$srcs = ["tocsin_native.c", "tocsin_all.c"]
$objs = ["tocsin_native.o", "tocsin_all.o"]
create_makefile("tocsin/tocsin_native")
