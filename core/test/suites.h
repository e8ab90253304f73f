/* The list of C test suites: add a line per suite (and its file). */
#ifndef TOCSIN_SUITES_H
#define TOCSIN_SUITES_H

void suite_basics(void);
void suite_cron(void);
void suite_coord(void);

static const struct {
    const char *name;
    void (*fn)(void);
} SUITES[] = {
    {"basics", suite_basics},
    {"cron", suite_cron},
    {"coord", suite_coord},
};

#endif
