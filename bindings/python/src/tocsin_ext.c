/* The loadable SQLite extension shipped inside the Python package: the same
 * core, built against the host's SQLite routines (entry point sqlite3_tocsin_init). */
#define TOCSIN_EXTENSION 1
#include "tocsin_all.c"
