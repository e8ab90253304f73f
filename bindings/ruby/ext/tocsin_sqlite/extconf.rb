# Builds tocsin/sqlite/tocsin.so: the loadable SQLite extension (entry point
# sqlite3_tocsin_init, derived by SQLite from the file name) for the host's own
# connections (the sqlite3 gem, ActiveRecord). It calls SQLite through the host's
# API table, so it runs on whatever SQLite copy loads it, and links no Ruby.
require "mkmf"

core = with_config("tocsin-core") || File.join(__dir__, "..", "tocsin", "core")
unless File.file?(File.join(core, "src", "tocsin_all.c"))
  abort "tocsin: the C core is missing (#{core})"
end
core = File.expand_path(core)
have_library("pthread")

$INCFLAGS << " -I#{core}/include -I#{core}/src"
$CFLAGS << " -std=gnu11 -fvisibility=hidden -DTOCSIN_EXTENSION -Wall -Wno-unused-parameter"
$VPATH << "#{core}/src"
$srcs = ["tocsin_all.c"]
$objs = ["tocsin_all.o"]
# A plain shared object: no libruby (a sqlite3 shell loading it must not pull Ruby in).
$LIBRUBYARG = ""
$LIBRUBYARG_SHARED = ""
$LIBS = $LIBS.sub(/-lruby\S*/, "")
create_makefile("tocsin/sqlite/tocsin")
