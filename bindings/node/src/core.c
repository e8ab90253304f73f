/* The tocsin core, compiled into the addon as a SQLite loadable extension
 * (TOCSIN_EXTENSION): it calls SQLite only through the routine table of the
 * SQLite that loaded it (better-sqlite3's), so the process has one SQLite.
 * core/ is a copy of the repository's core made by scripts/sync-core.js. */
#include "tocsin_all.c"

/* Whether an SQLite has loaded the addon as its extension yet (before that,
 * no core function may run: the routine table is empty). */
int tocsin_node_api_ready(void) { return sqlite3_api != 0; }
