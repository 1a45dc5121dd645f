/*
 * An LD_PRELOAD shim that moves a process's wall clock, and nothing else.
 *
 * The wall clock as read through clock_gettime(CLOCK_REALTIME) (and its coarse variant),
 * gettimeofday() and time() runs JOBSVC_CHAOS_CLOCK_SHIFT_SECONDS (a decimal number,
 * negative for behind) ahead of the machine's. CLOCK_MONOTONIC and every other clock are
 * left alone: Python's sleeps, timeouts and thread waits run on the monotonic clock, and
 * libfaketime, which shifts that too, breaks them.
 *
 * Built by tools/chaos (clock_skew.py) with `gcc -shared -fPIC` into the run's directory.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

#define NS_PER_SECOND 1000000000LL

static long long shift_ns;
static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_gettimeofday)(struct timeval *, void *);

__attribute__((constructor)) static void clock_shift_init(void) {
    const char *value = getenv("JOBSVC_CHAOS_CLOCK_SHIFT_SECONDS");
    shift_ns = value ? (long long)(strtod(value, NULL) * NS_PER_SECOND) : 0;
    real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    real_gettimeofday = dlsym(RTLD_NEXT, "gettimeofday");
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_sec * NS_PER_SECOND + ts->tv_nsec + shift_ns;
    ts->tv_sec = (time_t)(ns / NS_PER_SECOND);
    ts->tv_nsec = (long)(ns % NS_PER_SECOND);
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += NS_PER_SECOND;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (!real_clock_gettime) clock_shift_init();
    int result = real_clock_gettime(clock, ts);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) shift(ts);
    return result;
}

int gettimeofday(struct timeval *tv, void *tz) {
    if (!real_gettimeofday) clock_shift_init();
    int result = real_gettimeofday(tv, tz);
    if (result == 0) {
        struct timespec ts = {tv->tv_sec, (long)tv->tv_usec * 1000};
        shift(&ts);
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return result;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
