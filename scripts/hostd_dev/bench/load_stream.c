/* The bench load driver's chunk loop (load_driver.py): what one chunk costs is one wake-up
 * at an absolute deadline, one clock read and one write, without the interpreter's cold
 * bytecode on the way. Built with the machine's cc on first use (load_driver.build).
 *
 * watch() is called once per process: a command arriving on cmd_fd raises SIGIO (O_ASYNC),
 * whose handler only sets a flag, and the process's timer slack is set. stream() sends chunks
 * i..n-1 of a turn: chunk k is due at start_ns + k * period_ns (CLOCK_MONOTONIC, the clock of
 * time.monotonic_ns); it sleeps with clock_nanosleep(TIMER_ABSTIME) to that deadline, then
 * puts the current time as STAMP_DIGITS zero-padded decimal digits at frame[off] and writes
 * the frame. Returns n when all were sent, k < n when a command was waiting before chunk k
 * (the caller reads it and calls again from k), -1 on an error (errno says which).
 *
 * Why not ppoll(cmd_fd, timeout), as before: that is a poll table set up and torn down and
 * two more clock reads per chunk, for a command that comes once a turn. The signal
 * interrupts the sleep instead (clock_nanosleep is never restarted after a handler). A
 * signal landing between the flag test and the sleep is seen after that sleep: a command
 * waits at most one chunk period. Why a timer slack: a sleep whose wake-up may come up to
 * `slack_ns` late can share an expiry (one timer interrupt, one timer programming) with the
 * other drivers' sleeps; each such event is a VM exit on this VM. The stamp is read after
 * the wake-up, so what the bench measures (stamp -> window) does not include the slack.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define STAMP_DIGITS 20

/* Set by SIGIO: a command may be waiting. Starts set, so a turn's first chunk checks. */
static volatile sig_atomic_t cmd_signalled = 1;

static void on_sigio(int sig) {
    (void)sig;
    cmd_signalled = 1;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int watch(int cmd_fd, long slack_ns) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigio;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* the interpreter's blocking reads and writes go on */
    sigset_t io;
    sigemptyset(&io);
    sigaddset(&io, SIGIO);
    if (sigaction(SIGIO, &sa, NULL) < 0 || sigprocmask(SIG_UNBLOCK, &io, NULL) < 0)
        return -1;
    int flags = fcntl(cmd_fd, F_GETFL);
    if (flags < 0 || fcntl(cmd_fd, F_SETOWN, getpid()) < 0
        || fcntl(cmd_fd, F_SETFL, flags | O_ASYNC) < 0)
        return -1;
    if (slack_ns > 0 && prctl(PR_SET_TIMERSLACK, (unsigned long)slack_ns, 0, 0, 0) < 0)
        return -1;
    return 0;
}

long stream(int out_fd, int cmd_fd, unsigned char *frame, long len, long off, long i, long n,
            int64_t start_ns, int64_t period_ns) {
    for (; i < n; i++) {
        for (;;) {
            if (cmd_signalled) {
                cmd_signalled = 0;
                struct pollfd cmd = {cmd_fd, POLLIN, 0};
                int r = poll(&cmd, 1, 0);
                if (r > 0) {
                    cmd_signalled = 1; /* the caller reads it; check again next call */
                    return i;
                }
                if (r < 0 && errno != EINTR) return -1;
            }
            if (period_ns <= 0) break;
            int64_t due = start_ns + i * period_ns;
            struct timespec t = {due / 1000000000LL, due % 1000000000LL};
            int r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
            if (r == 0) break;
            if (r != EINTR) {
                errno = r;
                return -1;
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
