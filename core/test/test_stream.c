/* Streams and notifications. */
#include "test.h"

static void stream_basics(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("s_basic", &clk);
    tocsin_message *m = NULL;
    size_t n = 0;
    int64_t off1 = 0, off2 = 0, offs[3], stored = -1, got = -1;
    const char *payloads[3] = {"1", "{\"b\":2}", "[3]"};
    const char *keys[3] = {"k1", NULL, "k3"};
    CHECK_OK(db, tocsin_stream_publish(db, &off1, "orders", "{\"a\":1}", "cust-1", "{\"trace\":\"t\"}"));
    CHECK_OK(db, tocsin_stream_publish(db, &off2, "other", "{}", NULL, NULL));
    CHECK(off2 > off1);
    CHECK_OK(db, tocsin_stream_publish_many(db, offs, "orders", payloads, keys, 3));
    CHECK(offs[0] > off2 && offs[1] > offs[0] && offs[2] > offs[1]);
    CHECK_OK(db, tocsin_stream_read(db, &m, &n, "orders", 0, 100));
    CHECK_EQ_I(n, 4);
    if (n == 4) {
        CHECK_EQ_I(m[0].id, off1);
        CHECK_STR(m[0].name, "orders");
        CHECK_STR(m[0].key, "cust-1");
        CHECK_STR(m[0].payload, "{\"a\":1}");
        CHECK_STR(m[0].meta, "{\"trace\":\"t\"}");
        CHECK_EQ_I(m[0].created_at, 1000);
        CHECK(m[2].key == NULL);
        CHECK_STR(m[3].payload, "[3]");
    }
    tocsin_messages_free(m, n);
    CHECK_OK(db, tocsin_stream_read(db, &m, &n, "orders", offs[0], 1));
    CHECK_EQ_I(n, 1);
    CHECK_EQ_I(m[0].id, offs[1]);
    tocsin_messages_free(m, n);
    CHECK_OK(db, tocsin_stream_read(db, &m, &n, "orders", offs[2], 10));
    CHECK_EQ_I(n, 0);
    CHECK(m == NULL);

    /* consumer offsets only move forward */
    CHECK_OK(db, tocsin_stream_offset(db, &got, "c1", "orders"));
    CHECK_EQ_I(got, 0);
    CHECK_OK(db, tocsin_stream_save_offset(db, &stored, "c1", "orders", offs[1]));
    CHECK_EQ_I(stored, offs[1]);
    CHECK_OK(db, tocsin_stream_save_offset(db, &stored, "c1", "orders", off1));
    CHECK_EQ_I(stored, offs[1]);
    CHECK_OK(db, tocsin_stream_offset(db, &got, "c1", "orders"));
    CHECK_EQ_I(got, offs[1]);
    CHECK_OK(db, tocsin_stream_offset(db, &got, "c1", "other"));
    CHECK_EQ_I(got, 0);

    /* bad input: clear errors, nothing written */
    CHECK_EQ_I(tocsin_stream_publish(db, &off1, "", "{}", NULL, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_publish(db, &off1, "t", "nope", NULL, NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_publish(db, &off1, "t", "{}", "", NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_publish(db, &off1, "t", "{}", NULL, "1"), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_publish(db, NULL, "t", "{}", NULL, NULL), TOCSIN_INVALID);
    payloads[1] = "{broken";
    CHECK_EQ_I(tocsin_stream_publish_many(db, offs, "t", payloads, NULL, 3), TOCSIN_INVALID);
    CHECK_STR(tocsin_errmsg(db), "event 1: payload is not valid JSON"); /* which one */
    CHECK_EQ_I(tocsin_stream_publish_many(db, offs, "t", payloads + 1, NULL, 1), TOCSIN_INVALID);
    CHECK_STR(tocsin_errmsg(db), "payload is not valid JSON"); /* the only one */
    {
        const char *ks[3] = {"a", NULL, "b\x01"};
        payloads[1] = "2";
        CHECK_EQ_I(tocsin_stream_publish_many(db, offs, "t", payloads, ks, 3), TOCSIN_INVALID);
        CHECK(strncmp(tocsin_errmsg(db), "event 2: key ", 13) == 0);
    }
    CHECK_EQ_I(tocsin_stream_read(db, &m, &n, "orders", 0, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_read(db, &m, &n, "", 0, 10), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_save_offset(db, NULL, "", "orders", 1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_save_offset(db, NULL, "c", "orders", -1), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_stream_offset(db, NULL, "c", "orders"), TOCSIN_INVALID);
    CHECK_EQ_I(t_count(db, "_tocsin_events"), 5);
    CHECK_EQ_I(t_count(db, "_tocsin_events WHERE topic = 't'"), 0);
    tocsin_close(db);
}

static void stream_trim(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("s_trim", &clk);
    tocsin_trim_opts o = TOCSIN_TRIM_OPTS_INIT;
    int64_t offs[10], n = 0;
    int i;
    for (i = 0; i < 10; i++) {
        clk.now = 1000 + i * 100;
        CHECK_OK(db, tocsin_stream_publish(db, &offs[i], "t", "{}", NULL, NULL));
    }
    CHECK_OK(db, tocsin_stream_publish(db, &n, "keep", "{}", NULL, NULL));
    CHECK_EQ_I(tocsin_stream_trim(db, &n, "t", &o), TOCSIN_INVALID); /* no criterion */
    o.max_age_ms = -5;
    CHECK_EQ_I(tocsin_stream_trim(db, &n, "t", &o), TOCSIN_INVALID);
    /* by age: older than 1000 - 250 ms */
    clk.now = 2000;
    o.max_age_ms = 850; /* cutoff 1150: drops t=1000, 1100 */
    CHECK_OK(db, tocsin_stream_trim(db, &n, "t", &o));
    CHECK_EQ_I(n, 2);
    /* by count */
    o = (tocsin_trim_opts)TOCSIN_TRIM_OPTS_INIT;
    o.max_count = 5;
    CHECK_OK(db, tocsin_stream_trim(db, &n, "t", &o));
    CHECK_EQ_I(n, 3);
    CHECK_EQ_I(t_count(db, "_tocsin_events WHERE topic = 't'"), 5);
    /* below the lowest consumer offset; no consumers: nothing */
    o = (tocsin_trim_opts)TOCSIN_TRIM_OPTS_INIT;
    o.below_consumers = 1;
    CHECK_OK(db, tocsin_stream_trim(db, &n, "t", &o));
    CHECK_EQ_I(n, 0);
    CHECK_OK(db, tocsin_stream_save_offset(db, NULL, "fast", "t", offs[9]));
    CHECK_OK(db, tocsin_stream_save_offset(db, NULL, "slow", "t", offs[6]));
    CHECK_OK(db, tocsin_stream_trim(db, &n, "t", &o));
    CHECK_EQ_I(n, 2); /* offsets 5 and 6 (indexes) */
    CHECK_EQ_I(t_count(db, "_tocsin_events WHERE topic = 't'"), 3);
    CHECK_EQ_I(t_count(db, "_tocsin_events WHERE topic = 'keep'"), 1);
    tocsin_close(db);
}

static void notifications(void) {
    t_clock clk = {1000};
    tocsin_db *db = t_open("n_basic", &clk);
    tocsin_message *m = NULL;
    size_t n = 0;
    int64_t id1 = 0, id2 = 0, id3 = 0, max = -1, pruned = 0;
    int i;
    CHECK_OK(db, tocsin_notify_max_id(db, &max));
    CHECK_EQ_I(max, 0);
    CHECK_OK(db, tocsin_notify(db, &id1, "jobs", "{\"n\":1}", NULL));
    CHECK_OK(db, tocsin_notify(db, &id2, "other", "2", "{\"from\":\"me\"}"));
    CHECK_OK(db, tocsin_notify(db, &id3, "jobs", "{\"n\":3}", NULL));
    CHECK_OK(db, tocsin_notify_max_id(db, &max));
    CHECK_EQ_I(max, id3);
    CHECK_OK(db, tocsin_notify_read(db, &m, &n, "jobs", 0, 10));
    CHECK_EQ_I(n, 2);
    if (n == 2) {
        CHECK_EQ_I(m[0].id, id1);
        CHECK_STR(m[1].payload, "{\"n\":3}");
        CHECK_STR(m[0].name, "jobs");
    }
    tocsin_messages_free(m, n);
    CHECK_OK(db, tocsin_notify_read(db, &m, &n, "other", id1, 10));
    CHECK_EQ_I(n, 1);
    CHECK_STR(m[0].meta, "{\"from\":\"me\"}");
    tocsin_messages_free(m, n);
    /* bad input */
    CHECK_EQ_I(tocsin_notify(db, &id1, "", "{}", NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_notify(db, &id1, "c", "{x", NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_notify(db, &id1, "c", "{}", "[]"), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_notify(db, NULL, "c", "{}", NULL), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_notify_read(db, &m, &n, "c", 0, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_notify_prune(db, &pruned, -1, 0), TOCSIN_INVALID);
    CHECK_EQ_I(tocsin_notify_set_autotrim(db, 0, 0, 5), TOCSIN_INVALID);
    CHECK_EQ_I(t_count(db, "_tocsin_notifications"), 3);

    /* prune by age and per-channel count */
    for (i = 0; i < 5; i++) {
        clk.now = 2000 + i;
        CHECK_OK(db, tocsin_notify(db, &id1, "jobs", "{}", NULL));
    }
    clk.now = 2004;
    CHECK_OK(db, tocsin_notify_prune(db, &pruned, 1000, 0)); /* created before 1004 */
    CHECK_EQ_I(pruned, 3);
    CHECK_OK(db, tocsin_notify_prune(db, &pruned, 0, 2));
    CHECK_EQ_I(pruned, 3);
    CHECK_EQ_I(t_count(db, "_tocsin_notifications"), 2);
    /* ids keep growing after a prune; max_id remembers the highest */
    CHECK_OK(db, tocsin_notify_prune(db, &pruned, 1, 0));
    CHECK_OK(db, tocsin_notify_max_id(db, &max));
    CHECK_EQ_I(max, id1);

    /* auto-trim, stored in the database: one_in = 1 trims on every notify */
    CHECK_OK(db, tocsin_notify_set_autotrim(db, 0, 3, 1));
    for (i = 0; i < 10; i++) CHECK_OK(db, tocsin_notify(db, &id1, "jobs", "{}", NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_notifications"), 3);
    CHECK_OK(db, tocsin_notify_set_autotrim(db, 0, 0, 0));
    for (i = 0; i < 10; i++) CHECK_OK(db, tocsin_notify(db, &id1, "jobs", "{}", NULL));
    CHECK_EQ_I(t_count(db, "_tocsin_notifications"), 13);
    tocsin_close(db);
}

void suite_stream(void) {
    stream_basics();
    stream_trim();
}

void suite_notify(void) { notifications(); }
