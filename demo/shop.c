/* The demo's C part: a shop that records an order and, in the same
 * transaction, enqueues a call of the send_email task (a task envelope: a
 * Python worker runs it), publishes an event to the "orders" stream and
 * notifies listeners. Prints the job id. Usage: shop DB ITEM */
#include <stdio.h>

#include "tocsin.h"

int main(int argc, char **argv) {
    tocsin_db *db = NULL;
    int64_t job = 0, offset = 0, note = 0;
    char payload[256];
    if (argc != 3) {
        fprintf(stderr, "usage: %s DB ITEM\n", argv[0]);
        return 2;
    }
    if (tocsin_open(&db, argv[1], NULL) != TOCSIN_OK) goto fail;
    snprintf(payload, sizeof payload, "{\"task\":\"send_email\",\"args\":[\"%s\"]}", argv[2]);
    if (tocsin_begin(db) != TOCSIN_OK ||
        tocsin_exec(db, "CREATE TABLE IF NOT EXISTS orders(id INTEGER PRIMARY KEY, item TEXT)") ||
        tocsin_exec(db, "INSERT INTO orders(item) VALUES ('demo')") ||
        tocsin_queue_enqueue(db, &job, "emails", payload, NULL) ||
        tocsin_stream_publish(db, &offset, "orders", "{\"by\":\"c\"}", NULL, NULL) ||
        tocsin_notify(db, &note, "orders", "{\"by\":\"c\"}", NULL) || tocsin_commit(db))
        goto fail;
    fprintf(stderr, "C shop: order for %s committed with job %lld, stream offset %lld, "
            "notification %lld\n", argv[2], (long long)job, (long long)offset, (long long)note);
    printf("%lld\n", (long long)job);
    tocsin_close(db);
    return 0;
fail:
    fprintf(stderr, "C shop: %s\n", tocsin_errmsg(db));
    tocsin_close(db);
    return 1;
}
