package main

/*
#cgo CFLAGS: -I${SRCDIR}/.. -DTOCSIN_EMBED -O2
#include <stdlib.h>
#include <time.h>
#include "tocsin.h"

// The C figures of the same operations, in this process, on a fresh file each: the
// baseline the Go binding's overhead is measured against.
static double now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}
static double c_enqueue(const char *path, int n) {
	tocsin_db *db = NULL;
	int64_t id;
	double t0;
	int i;
	if (tocsin_open(&db, path, NULL) != 0) return -1;
	t0 = now_ns();
	for (i = 0; i < n; i++)
		if (tocsin_queue_enqueue(db, &id, "bench", "{\"n\":1}", NULL) != 0) { tocsin_close(db); return -1; }
	t0 = (now_ns() - t0) / n;
	tocsin_close(db);
	return t0;
}
static double c_claim_ack(const char *path, int n) {
	tocsin_db *db = NULL;
	tocsin_job *jobs;
	size_t got;
	int64_t id;
	int ok, i;
	double t0;
	if (tocsin_open(&db, path, NULL) != 0) return -1;
	for (i = 0; i < n; i++) tocsin_queue_enqueue(db, &id, "bench", "{\"n\":1}", NULL);
	t0 = now_ns();
	for (i = 0; i < n; i++) {
		if (tocsin_queue_claim(db, &jobs, &got, "bench", "w", 1, 30000) != 0 || got != 1) { tocsin_close(db); return -1; }
		tocsin_job_ack(db, &ok, jobs[0].id, jobs[0].token);
		tocsin_jobs_free(jobs, got);
	}
	t0 = (now_ns() - t0) / n;
	tocsin_close(db);
	return t0;
}
*/
import "C"

import "unsafe"

func cEnqueue(path string, n int) float64 {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	return float64(C.c_enqueue(p, C.int(n)))
}

func cClaimAck(path string, n int) float64 {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	return float64(C.c_claim_ack(p, C.int(n)))
}
