# frozen_string_literal: true

module Tocsin
  # One SQLite per process (docs/architecture.md, "Ruby: one SQLite per process").
  #
  # tocsin links the system's shared libsqlite3. A second copy of SQLite in the
  # process (the sqlite3 gem built from the gem registry bundles its own unless
  # installed with --enable-system-libraries) opening the same file can break POSIX
  # locks and corrupt the database. The core looks for the loaded objects that
  # carry a copy of SQLite (tocsin_check_sqlite_copies); checked at Tocsin.open,
  # which opens the file with tocsin's copy (Tocsin::SQL.load runs on the gem's).
  module OneSQLite
    module_function

    # Raises Tocsin::Error naming the copies when there is more than one.
    def check!
      msg = Native.sqlite_copies
      return if msg.nil?

      raise Error, "#{msg}. Use a sqlite3 gem linked to the system's libsqlite3 (Debian's ruby-sqlite3, or " \
                   "`gem install sqlite3 -- --enable-system-libraries`), or pass Tocsin.open check_sqlite: false " \
                   "if the other copy never opens this database file"
    end
  end
end
