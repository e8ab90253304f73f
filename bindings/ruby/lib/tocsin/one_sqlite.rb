# frozen_string_literal: true

module Tocsin
  # One SQLite per process (docs/architecture.md, "Ruby: one SQLite per process").
  #
  # tocsin links the system's shared libsqlite3. A second copy of SQLite in the
  # process (the sqlite3 gem built from the gem registry bundles its own unless
  # installed with --enable-system-libraries) opening the same file can break POSIX
  # locks and corrupt the database. Every copy of SQLite carries the format string
  # of its corruption reports ("%s at line %d of [%.10s]", which no SQLite client
  # contains), so the loaded objects that contain it are counted:
  # more than one means two copies. Checked at Tocsin.open and in the sqlite3-gem
  # helpers; the answer is cached per set of loaded objects.
  module OneSQLite
    @checked = nil
    @mutex = Mutex.new

    module_function

    # The loaded shared objects that contain a copy of SQLite.
    def copies
      @mutex.synchronize do
        objs = Native.loaded_objects
        return @checked[1] if @checked && @checked[0] == objs

        found = objs.uniq.select { |o| File.file?(o) && Native.file_has_sqlite?(o) }
        @checked = [objs, found]
        found
      end
    end

    # Raises Tocsin::Error naming the copies when there is more than one.
    def check!
      found = copies
      return if found.size <= 1

      raise Error, "two copies of SQLite are loaded in this process (#{found.join(", ")}); tocsin runs on " \
                   "#{Native.sqlite_object} and two copies opening one database file can break its locks " \
                   "and corrupt it. Use a sqlite3 gem linked to the system's libsqlite3 (Debian's " \
                   "ruby-sqlite3, or `gem install sqlite3 -- --enable-system-libraries`)"
    end
  end
end
