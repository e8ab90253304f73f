/* Results, locks, rate limits, scheduler (filled below). */
#include "test.h"
void suite_coord(void) {}
