/* exec_fuzz_child.c - the command of the exec host's fuzz test
 * (tests/integration/test_host_exec_fuzz.sh): a hostile child, its every
 * move drawn from the "seed" of the message body.
 *
 * Usage: exec_fuzz_child [MAX_OUTPUT]. It reads the body (all, some, none,
 * or closes stdin), may leave a grandchild holding stdout and stderr
 * (in its process group, ignoring SIGTERM; or in a session of its own for
 * a bounded time), writes to stdout one of: a JSON result, invalid UTF-8
 * in JSON, random binary, more than MAX_OUTPUT bytes, invalid or truncated
 * JSON, JSON nested deep, JSON byte by byte, no newline, nothing, or closes
 * stdout early; writes random stderr (long lines, NULs, no newline); and
 * ends with a random exit status, a random signal, or by sleeping past any
 * deadline (with or without SIGTERM ignored). It prints what it chose on
 * stderr first, so the daemon's log names each run's plan.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng;

/* splitmix64: small, and every seed gives a different stream */
static uint64_t next(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static unsigned pick(unsigned n)
{
    return (unsigned)(next() % n);
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* put writes all of buf to fd; stops quietly when the reader is gone. */
static void put(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        p += n;
        len -= (size_t)n;
    }
}

static void put_s(int fd, const char *s)
{
    put(fd, s, strlen(s));
}

/* read_body reads up to limit bytes of stdin into a buffer kept for the
 * seed; returns the bytes read. */
static size_t read_body(char *buf, size_t size, size_t limit)
{
    size_t got = 0;
    while (got < limit && got < size - 1) {
        size_t want = size - 1 - got < limit - got ? size - 1 - got
                                                   : limit - got;
        ssize_t n = read(0, buf + got, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    return got;
}

static void output(size_t max_output)
{
    char buf[4096];
    size_t n;

    switch (pick(12)) {
    case 0:
    case 1:
        snprintf(buf, sizeof buf, "{\"ok\":true,\"n\":%u}\n", pick(1000));
        put_s(1, buf);
        break;
    case 2: /* invalid UTF-8 inside a JSON string */
        put_s(1, "{\"s\":\"\xff\xfe\xc0\xaf\xed\xa0\x80\xe2\x82\"}\n");
        break;
    case 3: /* random bytes, NULs included */
        n = 1 + pick(200000);
        while (n > 0) {
            size_t k = n < sizeof buf ? n : sizeof buf;
            for (size_t i = 0; i < k; i++)
                buf[i] = (char)next();
            put(1, buf, k);
            n -= k;
        }
        break;
    case 4: /* more than max_output */
        memset(buf, 'a', sizeof buf);
        for (n = 0; n <= max_output + 1; n += sizeof buf)
            put(1, buf, sizeof buf);
        break;
    case 5: /* not JSON, or JSON cut short */
        put_s(1, pick(2) ? "{\"a\": [1, 2," : "not json at all\n");
        break;
    case 6: /* nested deep */
        n = 1 + pick(200000);
        for (size_t i = 0; i < n; i++)
            put(1, "[", 1);
        for (size_t i = 0; i < n; i++)
            put(1, "]", 1);
        break;
    case 7: /* a valid result, a byte at a time */
        for (const char *p = "{\"slow\":\"byte by byte\"}\n"; *p; p++) {
            put(1, p, 1);
            nap_ms(pick(5));
        }
        break;
    case 8: /* no newline */
        put_s(1, "{\"newline\":false}");
        break;
    case 9: /* nothing */
        break;
    case 10: /* stdout closed early, the run goes on */
        close(1);
        nap_ms(pick(300));
        break;
    default: /* JSON that is a scalar, then trailing bytes */
        put_s(1, pick(2) ? "42 43\n" : "\"just a string\"\n");
        break;
    }
}

static void errout(void)
{
    char buf[3000];
    switch (pick(4)) {
    case 0:
        for (unsigned i = 0, n = pick(200); i < n; i++)
            put_s(2, "a line on stderr\n");
        break;
    case 1: /* a long line with NULs and no newline */
        for (size_t i = 0; i < sizeof buf; i++)
            buf[i] = (char)(i % 7 == 0 ? 0 : 'x');
        put(2, buf, sizeof buf);
        break;
    default:
        break;
    }
}

/* grandchild leaves a process holding stdout and stderr behind. */
static void grandchild(unsigned kind)
{
    switch (kind) {
    case 0: /* in the group, deaf to SIGTERM: killed with the group */
        if (fork() == 0) {
            signal(SIGTERM, SIG_IGN);
            nap_ms(5000);
            _exit(0);
        }
        break;
    case 1:
    case 2: /* out of the group: its own session, for a bounded time */
        if (fork() == 0) {
            setsid();
            signal(SIGTERM, SIG_IGN);
            nap_ms(1000 + pick(3000));
            _exit(0);
        }
        break;
    default:
        break;
    }
}

int main(int argc, char **argv)
{
    size_t max_output = argc > 1 ? strtoul(argv[1], NULL, 10) : 65536;
    static char body[1 << 16];
    const char *s;

    /* the seed is at the start of the body: read that much first */
    read_body(body, sizeof body, 64);
    s = strstr(body, "\"seed\":");
    unsigned long long seed = s != NULL ? strtoull(s + 7, NULL, 10) : 1;
    rng = seed;
    unsigned in = pick(4), gc = pick(8), end = pick(12);
    char plan[128];
    snprintf(plan, sizeof plan,
             "plan: seed %llu stdin %u grandchild %u end %u\n", seed, in, gc,
             end);
    put_s(2, plan);

    switch (in) {
    case 0:
        read_body(body, sizeof body, SIZE_MAX);
        while (read(0, body, sizeof body) > 0) {
        }
        break;
    case 1:
        break;
    case 2:
        read_body(body, sizeof body, pick(100));
        break;
    default:
        close(0);
        break;
    }
    grandchild(gc);
    if (pick(2))
        errout();
    output(max_output);
    if (pick(3) == 0)
        errout();

    switch (end) {
    case 0:
    case 1:
    case 2:
        return 0;
    case 3:
        return 65;
    case 4:
        return 1 + (int)pick(255);
    case 5: {
        static const int sigs[] = {SIGSEGV, SIGABRT, SIGKILL, SIGTERM,
                                   SIGBUS, SIGFPE, SIGHUP, SIGUSR1, SIGPIPE};
        int sig = sigs[pick(sizeof sigs / sizeof sigs[0])];
        /* the default action: a sanitizer's handler would report it */
        signal(sig, SIG_DFL);
        raise(sig);
        return 2;
    }
    case 6: /* past any deadline, dies of SIGTERM */
        nap_ms(10000);
        return 0;
    case 7: /* past any deadline, deaf to SIGTERM */
        signal(SIGTERM, SIG_IGN);
        nap_ms(10000);
        return 0;
    case 8: /* exits at once, stdout open in a stopped grandchild */
        if (fork() == 0) {
            raise(SIGSTOP);
            _exit(0);
        }
        return 0;
    default: /* a short random life */
        nap_ms(pick(200));
        return pick(2) ? 0 : 3;
    }
}
