/* tcpproxy - a loopback TCP proxy for fault-injection tests. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* ppoll, accept4, the GNU strerror_r */
#endif

#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/*
 * Usage: tcpproxy LISTEN_PORT TARGET_HOST:TARGET_PORT CONTROL
 *
 * Listens on 127.0.0.1:LISTEN_PORT (0 = any free port) and forwards every
 * connection to TARGET_HOST:TARGET_PORT. CONTROL is a loopback TCP port
 * (digits; 0 = any free port) or a Unix socket path. Prints the bound
 * listen port on stdout as the first line, then the control port when it is
 * a TCP port, and flushes. Control connections send one command per line
 * and get one answer line per command ("ok", the stats, or "error ...").
 * Every command sets the whole mode, it does not combine with the previous
 * one:
 *
 *   pass                      forward normally (the initial mode)
 *   delay MS                  forward each chunk read from now on MS
 *                             milliseconds after it was read
 *   blackhole [up|down|both]  hold the data of that direction (up = client
 *                             to server; default both): it is still read,
 *                             up to the per-direction bound, but not
 *                             written until the mode changes, as across a
 *                             network partition. New connections are
 *                             accepted and held the same way (a hung
 *                             broker). Nothing is lost: "pass" afterwards
 *                             delivers what was held, in order.
 *   cut                       reset (SO_LINGER 0) every current connection,
 *                             both sides; then the mode is pass
 *   refuse                    reset every new connection at once; current
 *                             ones pass
 *   stats                     "conns N bytes_up N bytes_down N": open
 *                             connections, bytes forwarded in each
 *                             direction since the start
 *
 * Single-threaded: one ppoll(2) loop over the listening sockets, the
 * control clients and both sides of every connection. Exits 0 on SIGTERM
 * or SIGINT.
 */

/* Bytes read per read(2); each read becomes one chunk with its due time. */
#define TM_CHUNK_MAX 16384
/* Bytes held per direction of a connection; reading stops at this bound
 * until the destination takes some (the source then feels backpressure). */
#define TM_DIR_MAX (256 * 1024)
/* Open proxied connections; the listening socket is not polled past it. */
#define TM_CONNS_MAX 1024
/* Control clients and the longest command line. */
#define TM_CTLS_MAX 16
#define TM_LINE_MAX 256

struct tm_chunk {
	struct tm_chunk *next;
	int64_t due_ms; /* monotonic time it may be written at */
	size_t len;     /* bytes in data */
	size_t off;     /* bytes of data already written */
	char data[];
};

/* One direction of a connection: bytes read from src, queued for dst. */
struct tm_dir {
	struct tm_chunk *head, *tail;
	size_t queued; /* sum of (len - off) over the queue */
	int eof;       /* src sent FIN; no more reads */
	int shut;      /* queue drained after eof, shutdown(dst, SHUT_WR) done */
};

struct tm_conn {
	int cfd;        /* the accepted client */
	int sfd;        /* to the target */
	int connecting; /* sfd's non-blocking connect has not completed */
	int dead;       /* closed; removed at the end of the loop turn */
	struct tm_dir up;   /* client -> server */
	struct tm_dir down; /* server -> client */
	int cpoll, spoll;   /* indexes in the pollfd array, -1 if not polled */
};

struct tm_ctl {
	int fd;
	size_t len;
	char line[TM_LINE_MAX];
	int poll;
};

enum tm_bh { TM_BH_NONE = 0, TM_BH_UP = 1, TM_BH_DOWN = 2, TM_BH_BOTH = 3 };

static struct {
	int delay_ms;
	int blackhole; /* enum tm_bh bits */
	int refuse;
} tm_mode;

static struct tm_conn *tm_conns[TM_CONNS_MAX];
static size_t tm_nconns;
static struct tm_ctl tm_ctls[TM_CTLS_MAX];
static size_t tm_nctls;
static uint64_t tm_bytes_up, tm_bytes_down;
static struct sockaddr_storage tm_target;
static socklen_t tm_target_len;
static volatile sig_atomic_t tm_stop;

static void cb_signal(int sig)
{
	(void)sig;
	tm_stop = 1;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* say: a diagnostic line on stderr with errno's text when err != 0. */
static void say(const char *what, int err)
{
	char buf[128];
	const char *msg = "";
	if (err != 0) {
		/* the GNU strerror_r returns the message, maybe not in buf */
		msg = strerror_r(err, buf, sizeof buf);
	}
	fprintf(stderr, "tcpproxy: %s%s%s\n", what, err ? ": " : "", msg);
}

/* reset_close: close fd so that the peer gets a RST, not a FIN. */
static void reset_close(int fd)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	if (fd < 0)
		return;
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	close(fd);
}

static void dir_clear(struct tm_dir *d)
{
	struct tm_chunk *c = d->head;
	while (c != NULL) {
		struct tm_chunk *next = c->next;
		free(c);
		c = next;
	}
	d->head = d->tail = NULL;
	d->queued = 0;
}

/* conn_kill: reset both sides and free the buffers; the conn struct stays
 * (marked dead) until the end of the loop turn, since the pollfd array
 * still refers to it. */
static void conn_kill(struct tm_conn *c)
{
	if (c->dead)
		return;
	reset_close(c->cfd);
	reset_close(c->sfd);
	c->cfd = c->sfd = -1;
	dir_clear(&c->up);
	dir_clear(&c->down);
	c->dead = 1;
}

/* conn_finish: both directions ended cleanly (FIN each way, all data
 * delivered): an orderly close. */
static void conn_finish(struct tm_conn *c)
{
	close(c->cfd);
	close(c->sfd);
	c->cfd = c->sfd = -1;
	c->dead = 1;
}

static void conns_compact(void)
{
	size_t i, j = 0;
	for (i = 0; i < tm_nconns; i++) {
		if (tm_conns[i]->dead)
			free(tm_conns[i]);
		else
			tm_conns[j++] = tm_conns[i];
	}
	tm_nconns = j;
}

static int dir_held(int bit)
{
	return (tm_mode.blackhole & bit) != 0;
}

/* dir_read: read one chunk from src into d. Returns 0, or -1 when the
 * connection must be reset (read error, no memory). */
static int dir_read(struct tm_dir *d, int src)
{
	char buf[TM_CHUNK_MAX];
	struct tm_chunk *c;
	ssize_t n;
	int rc = -1;

	assert(!d->eof && d->queued < TM_DIR_MAX);
	n = read(src, buf, sizeof buf);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			rc = 0;
		goto out;
	}
	if (n == 0) {
		d->eof = 1;
		rc = 0;
		goto out;
	}
	c = malloc(sizeof *c + (size_t)n);
	if (c == NULL)
		goto out;
	memcpy(c->data, buf, (size_t)n);
	c->len = (size_t)n;
	c->off = 0;
	c->next = NULL;
	c->due_ms = now_ms() + tm_mode.delay_ms;
	if (d->tail != NULL)
		d->tail->next = c;
	else
		d->head = c;
	d->tail = c;
	d->queued += (size_t)n;
	rc = 0;
out:
	return rc;
}

/* dir_due: d has a chunk that may be written now. */
static int dir_due(const struct tm_dir *d, int bit, int64_t now)
{
	return d->head != NULL && !dir_held(bit) && d->head->due_ms <= now;
}

/* dir_write: write the due chunks of d to dst; after the source's EOF and
 * the last byte, pass the FIN on. Returns 0, or -1 on a write error. */
static int dir_write(struct tm_dir *d, int bit, int dst, uint64_t *count)
{
	int64_t now = now_ms();
	int rc = -1;

	while (dir_due(d, bit, now)) {
		struct tm_chunk *c = d->head;
		ssize_t n = send(dst, c->data + c->off, c->len - c->off,
				 MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK ||
			    errno == EINTR)
				break;
			goto out;
		}
		c->off += (size_t)n;
		d->queued -= (size_t)n;
		*count += (uint64_t)n;
		if (c->off < c->len)
			break;
		d->head = c->next;
		if (d->head == NULL)
			d->tail = NULL;
		free(c);
	}
	if (d->eof && d->head == NULL && !d->shut) {
		shutdown(dst, SHUT_WR);
		d->shut = 1;
	}
	rc = 0;
out:
	return rc;
}

/* accept_all: accept every pending connection; reset it at once when
 * refusing or full, else start its connect to the target. */
static void accept_all(int lfd)
{
	for (;;) {
		struct tm_conn *c;
		int sfd, cfd = accept4(lfd, NULL, NULL,
				       SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK &&
			    errno != EINTR && errno != ECONNABORTED)
				say("accept", errno);
			return;
		}
		if (tm_mode.refuse || tm_nconns >= TM_CONNS_MAX) {
			reset_close(cfd);
			continue;
		}
		sfd = socket(tm_target.ss_family,
			     SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		c = calloc(1, sizeof *c);
		if (sfd < 0 || c == NULL) {
			say("no socket or memory for a connection", errno);
			free(c);
			if (sfd >= 0)
				close(sfd);
			reset_close(cfd);
			continue;
		}
		c->cfd = cfd;
		c->sfd = sfd;
		c->cpoll = c->spoll = -1;
		if (connect(sfd, (struct sockaddr *)&tm_target,
			    tm_target_len) < 0) {
			if (errno != EINPROGRESS) {
				say("connect to the target", errno);
				conn_kill(c);
				free(c);
				continue;
			}
			c->connecting = 1;
		}
		{
			int one = 1;
			setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one,
				   sizeof one);
			setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one,
				   sizeof one);
		}
		tm_conns[tm_nconns++] = c;
	}
}

/* ------------------------------------------------------------- control */

static void cut_all(void)
{
	size_t i;
	for (i = 0; i < tm_nconns; i++)
		conn_kill(tm_conns[i]);
}

/* ctl_exec: carry out one command line; the answer (one line) in out. */
static void ctl_exec(char *line, char *out, size_t outsz)
{
	char word[32] = "", arg[32] = "", extra[2] = "";
	int n = sscanf(line, "%31s %31s %1s", word, arg, extra);

	snprintf(out, outsz, "ok\n");
	if (n >= 1 && strcmp(word, "pass") == 0 && n == 1) {
		memset(&tm_mode, 0, sizeof tm_mode);
	} else if (n == 2 && strcmp(word, "delay") == 0) {
		char *end;
		long ms = strtol(arg, &end, 10);
		if (*end != '\0' || ms < 0 || ms > 3600 * 1000) {
			snprintf(out, outsz, "error bad delay '%s'\n", arg);
		} else {
			memset(&tm_mode, 0, sizeof tm_mode);
			tm_mode.delay_ms = (int)ms;
		}
	} else if (n >= 1 && n <= 2 && strcmp(word, "blackhole") == 0) {
		int bh = -1;
		if (n == 1 || strcmp(arg, "both") == 0)
			bh = TM_BH_BOTH;
		else if (strcmp(arg, "up") == 0)
			bh = TM_BH_UP;
		else if (strcmp(arg, "down") == 0)
			bh = TM_BH_DOWN;
		if (bh < 0) {
			snprintf(out, outsz, "error bad direction '%s'\n", arg);
		} else {
			memset(&tm_mode, 0, sizeof tm_mode);
			tm_mode.blackhole = bh;
		}
	} else if (n == 1 && strcmp(word, "cut") == 0) {
		cut_all();
		memset(&tm_mode, 0, sizeof tm_mode);
	} else if (n == 1 && strcmp(word, "refuse") == 0) {
		memset(&tm_mode, 0, sizeof tm_mode);
		tm_mode.refuse = 1;
	} else if (n == 1 && strcmp(word, "stats") == 0) {
		size_t i, live = 0;
		for (i = 0; i < tm_nconns; i++)
			live += !tm_conns[i]->dead;
		snprintf(out, outsz,
			 "conns %zu bytes_up %llu bytes_down %llu\n", live,
			 (unsigned long long)tm_bytes_up,
			 (unsigned long long)tm_bytes_down);
	} else {
		snprintf(out, outsz, "error unknown command '%s'\n", line);
	}
	fprintf(stderr, "tcpproxy: %s -> %s", line, out);
}

static void ctl_close(struct tm_ctl *t)
{
	close(t->fd);
	t->fd = -1;
}

/* ctl_read: read what the client sent; run each complete line. */
static void ctl_read(struct tm_ctl *t)
{
	ssize_t n = read(t->fd, t->line + t->len, sizeof t->line - t->len);
	char *nl;

	if (n <= 0) {
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			ctl_close(t);
		return;
	}
	t->len += (size_t)n;
	while (t->fd >= 0 && (nl = memchr(t->line, '\n', t->len)) != NULL) {
		char out[TM_LINE_MAX + 64];
		size_t used = (size_t)(nl - t->line) + 1;
		*nl = '\0';
		if (nl > t->line && nl[-1] == '\r')
			nl[-1] = '\0';
		ctl_exec(t->line, out, sizeof out);
		/* a short answer to a client that waits for it: the socket
		 * buffer takes it whole, else the client is dropped */
		if (send(t->fd, out, strlen(out), MSG_NOSIGNAL) !=
		    (ssize_t)strlen(out))
			ctl_close(t);
		memmove(t->line, t->line + used, t->len - used);
		t->len -= used;
	}
	if (t->fd >= 0 && t->len == sizeof t->line) {
		const char *msg = "error line too long\n";
		send(t->fd, msg, strlen(msg), MSG_NOSIGNAL);
		ctl_close(t);
	}
}

static void ctl_accept(int lfd)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (tm_nctls >= TM_CTLS_MAX) {
			close(fd);
			continue;
		}
		tm_ctls[tm_nctls].fd = fd;
		tm_ctls[tm_nctls].len = 0;
		tm_ctls[tm_nctls].poll = -1;
		tm_nctls++;
	}
}

static void ctls_compact(void)
{
	size_t i, j = 0;
	for (i = 0; i < tm_nctls; i++)
		if (tm_ctls[i].fd >= 0)
			tm_ctls[j++] = tm_ctls[i];
	tm_nctls = j;
}

/* --------------------------------------------------------------- setup */

/* listen_tcp: a listening socket on 127.0.0.1:port; its port in *bound. */
static int listen_tcp(int port, int *bound)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK |
					   SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
	    listen(fd, 128) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		goto fail;
	*bound = ntohs(a.sin_port);
	return fd;
fail:
	say("listen on 127.0.0.1", errno);
	if (fd >= 0)
		close(fd);
	return -1;
}

static int listen_unix(const char *path)
{
	struct sockaddr_un a;
	int fd = -1;

	memset(&a, 0, sizeof a);
	a.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof a.sun_path) {
		say("control socket path too long", 0);
		goto fail;
	}
	memcpy(a.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
	    listen(fd, 16) < 0) {
		say("control socket", errno);
		goto fail;
	}
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	return -1;
}

/* parse_target: HOST:PORT into tm_target. */
static int parse_target(const char *arg)
{
	char host[256];
	const char *colon = strrchr(arg, ':');
	struct addrinfo hints, *res = NULL;
	size_t hlen;
	int rc = -1;

	if (colon == NULL || colon == arg ||
	    (hlen = (size_t)(colon - arg)) >= sizeof host)
		goto out;
	memcpy(host, arg, hlen);
	host[hlen] = '\0';
	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(host, colon + 1, &hints, &res) != 0 || res == NULL)
		goto out;
	memcpy(&tm_target, res->ai_addr, res->ai_addrlen);
	tm_target_len = res->ai_addrlen;
	rc = 0;
out:
	if (res != NULL)
		freeaddrinfo(res);
	return rc;
}

static int all_digits(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s != '\0'; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/* ---------------------------------------------------------------- loop */

/* conn_events: fill the pollfd entries of c; lower *timeout to the next
 * due chunk that waits only for its time. */
static void conn_events(struct tm_conn *c, struct pollfd *p, size_t *n,
			int64_t now, int64_t *next_due)
{
	short ce = 0, se = 0;
	const struct tm_dir *up = &c->up, *down = &c->down;

	if (!up->eof && up->queued < TM_DIR_MAX)
		ce |= POLLIN;
	if (c->connecting) {
		se |= POLLOUT;
	} else {
		if (!down->eof && down->queued < TM_DIR_MAX)
			se |= POLLIN;
		if (dir_due(up, TM_BH_UP, now))
			se |= POLLOUT;
	}
	if (dir_due(down, TM_BH_DOWN, now))
		ce |= POLLOUT;
	if (up->head != NULL && !dir_held(TM_BH_UP) && up->head->due_ms > now &&
	    up->head->due_ms < *next_due)
		*next_due = up->head->due_ms;
	if (down->head != NULL && !dir_held(TM_BH_DOWN) &&
	    down->head->due_ms > now && down->head->due_ms < *next_due)
		*next_due = down->head->due_ms;
	c->cpoll = (int)*n;
	p[(*n)++] = (struct pollfd){.fd = c->cfd, .events = ce};
	c->spoll = (int)*n;
	p[(*n)++] = (struct pollfd){.fd = c->sfd, .events = se};
}

/* conn_io: act on the poll results of c. Any error, a reset or a hang-up
 * of a side that is not read any more resets the whole connection: a
 * test sees a broken peer as a broken connection. */
static void conn_io(struct tm_conn *c, const struct pollfd *p)
{
	short cr = p[c->cpoll].revents, sr = p[c->spoll].revents;
	short ce = p[c->cpoll].events, se = p[c->spoll].events;

	if ((cr & POLLERR) || (sr & POLLERR) ||
	    ((cr & POLLHUP) && !(ce & POLLIN)) ||
	    ((sr & POLLHUP) && !(se & POLLIN) && !c->connecting))
		goto reset;
	if (c->connecting && (sr & (POLLOUT | POLLHUP))) {
		int err = 0;
		socklen_t len = sizeof err;
		if (getsockopt(c->sfd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 ||
		    err != 0) {
			say("connect to the target", err);
			goto reset;
		}
		c->connecting = 0;
		sr &= (short)~POLLOUT; /* it was not a writability report */
	}
	if ((cr & (POLLIN | POLLHUP)) && (ce & POLLIN) &&
	    dir_read(&c->up, c->cfd) < 0)
		goto reset;
	if ((sr & (POLLIN | POLLHUP)) && (se & POLLIN) &&
	    dir_read(&c->down, c->sfd) < 0)
		goto reset;
	/* Write whatever is due, also without POLLOUT: a chunk read just
	 * now usually goes straight out. */
	if (!c->connecting &&
	    dir_write(&c->up, TM_BH_UP, c->sfd, &tm_bytes_up) < 0)
		goto reset;
	if (dir_write(&c->down, TM_BH_DOWN, c->cfd, &tm_bytes_down) < 0)
		goto reset;
	if (c->up.shut && c->down.shut)
		conn_finish(c);
	return;
reset:
	conn_kill(c);
}

int main(int argc, char **argv)
{
	int lfd = -1, cfd = -1, lport = 0, cport = -1, rc = 1;
	const char *upath = NULL;
	struct pollfd *pfds = NULL;
	struct sigaction sa;
	sigset_t block, orig;
	size_t i;

	if (argc != 4 || !all_digits(argv[1])) {
		fprintf(stderr, "usage: tcpproxy LISTEN_PORT HOST:PORT "
				"CONTROL_PORT|CONTROL_SOCKET_PATH\n");
		return 2;
	}
	if (parse_target(argv[2]) < 0) {
		fprintf(stderr, "tcpproxy: bad target '%s'\n", argv[2]);
		return 2;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = cb_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* the signals arrive only inside ppoll: no lost wake-up */
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &orig);

	lfd = listen_tcp(atoi(argv[1]), &lport);
	if (lfd < 0)
		goto out;
	if (all_digits(argv[3])) {
		cfd = listen_tcp(atoi(argv[3]), &cport);
	} else {
		upath = argv[3];
		cfd = listen_unix(upath);
	}
	if (cfd < 0)
		goto out;
	printf("%d\n", lport);
	if (cport >= 0)
		printf("%d\n", cport);
	fflush(stdout);

	pfds = calloc(2 + TM_CTLS_MAX + 2 * TM_CONNS_MAX, sizeof *pfds);
	if (pfds == NULL)
		goto out;
	while (!tm_stop) {
		int64_t now = now_ms(), next_due = INT64_MAX;
		struct timespec ts, *tsp = NULL;
		size_t n = 0;

		pfds[n++] = (struct pollfd){
			.fd = lfd,
			.events = tm_nconns < TM_CONNS_MAX ? POLLIN : 0};
		pfds[n++] = (struct pollfd){.fd = cfd, .events = POLLIN};
		for (i = 0; i < tm_nctls; i++) {
			tm_ctls[i].poll = (int)n;
			pfds[n++] = (struct pollfd){.fd = tm_ctls[i].fd,
						    .events = POLLIN};
		}
		for (i = 0; i < tm_nconns; i++)
			conn_events(tm_conns[i], pfds, &n, now, &next_due);
		if (next_due != INT64_MAX) {
			int64_t wait = next_due - now;
			ts.tv_sec = wait / 1000;
			ts.tv_nsec = (long)(wait % 1000) * 1000000;
			tsp = &ts;
		}
		if (ppoll(pfds, n, tsp, &orig) < 0) {
			if (errno == EINTR)
				continue;
			say("ppoll", errno);
			goto out;
		}
		/* Connections first, then control: a "cut" acts on the
		 * connections polled in this turn only through their dead
		 * flag. New connections last, so their indexes are unset. */
		for (i = 0; i < tm_nconns; i++)
			if (!tm_conns[i]->dead)
				conn_io(tm_conns[i], pfds);
		for (i = 0; i < tm_nctls; i++)
			if (pfds[tm_ctls[i].poll].revents)
				ctl_read(&tm_ctls[i]);
		ctls_compact();
		conns_compact();
		if (pfds[1].revents & POLLIN)
			ctl_accept(cfd);
		if (pfds[0].revents & POLLIN)
			accept_all(lfd);
	}
	rc = 0;
out:
	for (i = 0; i < tm_nconns; i++) {
		conn_kill(tm_conns[i]);
		free(tm_conns[i]);
	}
	for (i = 0; i < tm_nctls; i++)
		close(tm_ctls[i].fd);
	free(pfds);
	if (lfd >= 0)
		close(lfd);
	if (cfd >= 0)
		close(cfd);
	if (upath != NULL && cfd >= 0)
		unlink(upath);
	return rc;
}
