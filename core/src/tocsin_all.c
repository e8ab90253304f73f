/* Unity build: the whole core as one translation unit (amalgamation-friendly). */
#include "platform.c"
#include "db.c"
#include "schema.c"
#include "queue.c"
#include "stream.c"
#include "notify.c"
#include "watcher.c"
#include "ext.c"
