/* A shared object that carries the format of SQLite's corruption reports but
 * exports no SQLite function: how a copy of SQLite compiled in with hidden
 * symbols looks to tocsin_check_sqlite_copies (test_basics.c). */
const char tocsin_test_fake_copy[] = "%s at line %d of [%.10s]";
