/* The list of C test suites: add a line per suite (and its file). */
#ifndef TOCSIN_SUITES_H
#define TOCSIN_SUITES_H

void suite_basics(void);
void suite_json(void);
void suite_queue(void);
void suite_claim(void);
void suite_stream(void);
void suite_notify(void);
void suite_crash(void);
void suite_wake(void);
void suite_cron(void);
void suite_coord(void);
void suite_harden(void);
void suite_threads(void);
void suite_worker(void);
void suite_waits(void);
void suite_migrate(void);

static const struct {
    const char *name;
    void (*fn)(void);
} SUITES[] = {
    {"basics", suite_basics},
    {"json", suite_json},
    {"queue", suite_queue},
    {"claim", suite_claim},
    {"stream", suite_stream},
    {"notify", suite_notify},
    {"crash", suite_crash},
    {"wake", suite_wake},
    {"cron", suite_cron},
    {"coord", suite_coord},
    {"harden", suite_harden},
    {"threads", suite_threads},
    {"worker", suite_worker},
    {"waits", suite_waits},
    {"migrate", suite_migrate},
};

#endif
