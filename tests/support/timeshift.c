/* A time-shifting LD_PRELOAD for tests: moves one process's wall clock by an offset in ms
 * read from the file named by $TIMESHIFT_FILE (one signed integer). It shifts
 * clock_gettime(CLOCK_REALTIME / _COARSE), gettimeofday, time and timespec_get; every other
 * clock (CLOCK_MONOTONIC, ...) is untouched. The file is re-read at most once a millisecond
 * (of CLOCK_MONOTONIC), so a change is seen within about 1 ms; write it atomically (rename).
 *
 * Why not libfaketime: Debian's redis-server links jemalloc, which calls clock_gettime while
 * libfaketime is still resolving the real one through dlsym (which allocates): "Unexpected
 * recursive calls". Here nothing allocates and nothing is resolved: the clocks are read with
 * the raw syscall, the file with open/read/close (async-signal-safe), state in atomics.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char shift_path[4096];
static long long offset_ms;     /* atomic */
static long long next_read_ns;  /* atomic: CLOCK_MONOTONIC ns of the next re-read */

__attribute__((constructor)) static void timeshift_init(void) {
    const char *p = getenv("TIMESHIFT_FILE");
    if (p != NULL && strlen(p) < sizeof shift_path) {
        memcpy(shift_path, p, strlen(p) + 1);
    }
}

static int raw_clock(clockid_t id, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, id, ts);
}

/* Parses "[-]digits" (surrounding whitespace allowed); 0 on failure. */
static int parse_ms(const char *buf, long n, long long *out) {
    long i = 0;
    int neg = 0, digits = 0;
    long long v = 0;
    while (i < n && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\t')) i++;
    if (i < n && (buf[i] == '-' || buf[i] == '+')) neg = buf[i++] == '-';
    for (; i < n && buf[i] >= '0' && buf[i] <= '9' && digits < 18; i++, digits++) {
        v = v * 10 + (buf[i] - '0');
    }
    if (digits == 0) return 0;
    *out = neg ? -v : v;
    return 1;
}

static long long current_offset_ms(void) {
    if (shift_path[0] == '\0') return 0;
    struct timespec mono;
    if (raw_clock(CLOCK_MONOTONIC, &mono) == 0) {
        long long now = (long long)mono.tv_sec * 1000000000LL + mono.tv_nsec;
        long long due = __atomic_load_n(&next_read_ns, __ATOMIC_ACQUIRE);
        if (now >= due &&
            __atomic_compare_exchange_n(&next_read_ns, &due, now + 1000000LL, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            int saved_errno = errno;
            int fd = (int)syscall(SYS_openat, AT_FDCWD, shift_path, O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                char buf[64];
                long n = (long)syscall(SYS_read, fd, buf, sizeof buf);
                long long v;
                if (n > 0 && parse_ms(buf, n, &v)) {
                    __atomic_store_n(&offset_ms, v, __ATOMIC_RELEASE);
                }
                syscall(SYS_close, fd);
            }
            errno = saved_errno;
        }
    }
    return __atomic_load_n(&offset_ms, __ATOMIC_ACQUIRE);
}

static void shift(struct timespec *ts) {
    long long off = current_offset_ms();
    if (off == 0) return;
    long long ns = (long long)ts->tv_nsec + (off % 1000) * 1000000LL;
    long long sec = (long long)ts->tv_sec + off / 1000;
    while (ns < 0) { ns += 1000000000LL; sec -= 1; }
    while (ns >= 1000000000LL) { ns -= 1000000000LL; sec += 1; }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)ns;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = raw_clock(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    if (tz != NULL) memset(tz, 0, sizeof(struct timezone));
    struct timespec ts;
    int rc = raw_clock(CLOCK_REALTIME, &ts);
    if (rc != 0) return rc;
    shift(&ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (raw_clock(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    shift(&ts);
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}

int timespec_get(struct timespec *ts, int base) {
    if (base != TIME_UTC || raw_clock(CLOCK_REALTIME, ts) != 0) return 0;
    shift(ts);
    return base;
}
