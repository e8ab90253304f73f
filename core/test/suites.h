/* The list of C test suites: add a line per suite (and its file). */
#ifndef TOCSIN_SUITES_H
#define TOCSIN_SUITES_H

void suite_basics(void);
void suite_wake(void);

static const struct {
    const char *name;
    void (*fn)(void);
} SUITES[] = {
    {"basics", suite_basics},
    {"wake", suite_wake},
};

#endif
