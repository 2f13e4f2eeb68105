/* The bench load driver's chunk loop (load_driver.py): what one chunk costs is one wake-up
 * at an absolute deadline, one clock read and one write, without the interpreter's cold
 * bytecode on the way. Built with the machine's cc on first use (load_driver.build).
 *
 * stream() sends chunks i..n-1 of a turn: chunk k is due at start_ns + k * period_ns
 * (CLOCK_MONOTONIC, the clock of time.monotonic_ns); before each write it puts the current
 * time as STAMP_DIGITS zero-padded decimal digits at frame[off]. Returns n when all were
 * sent, k < n when the command fd became readable while waiting for chunk k (the caller
 * reads it and calls again from k), -1 on an error (errno says which).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define STAMP_DIGITS 20

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

long stream(int out_fd, int cmd_fd, unsigned char *frame, long len, long off, long i, long n,
            int64_t start_ns, int64_t period_ns) {
    struct pollfd cmd = {cmd_fd, POLLIN, 0};
    for (; i < n; i++) {
        if (period_ns > 0) {
            int64_t due = start_ns + i * period_ns;
            for (;;) {
                int64_t left = due - now_ns();
                if (left <= 0) break;
                struct timespec t = {left / 1000000000LL, left % 1000000000LL};
                int r = ppoll(&cmd, 1, &t, NULL);
                if (r > 0) return i;
                if (r < 0 && errno != EINTR) return -1;
            }
        }
        uint64_t stamp = (uint64_t)now_ns();
        for (int d = STAMP_DIGITS - 1; d >= 0; d--) {
            frame[off + d] = (unsigned char)('0' + stamp % 10);
            stamp /= 10;
        }
        long done = 0;
        while (done < len) {
            ssize_t w = write(out_fd, frame + done, (size_t)(len - done));
            if (w < 0) {
                if (errno == EINTR) continue;
                return -1;
            }
            done += w;
        }
    }
    return n;
}
