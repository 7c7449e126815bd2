/* net_private.h - one connection to a Redis server: TCP or TLS, with deadlines,
 * speaking RESP through hiredis's reader and command formatter. */
#ifndef TASKMILL_REDIS_NET_H
#define TASKMILL_REDIS_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* ssize_t */

#include <hiredis/hiredis.h>

/*
 * Debian 12's hiredis (0.14) has no TLS; its reader and formatter are
 * public and independent of its socket code, so the socket, the TLS
 * session (OpenSSL) and every wait are ours: the descriptor is always
 * non-blocking, and every read, write, connect and handshake waits in
 * poll() for at most what is left of its deadline.
 */

/* The longest line (a type header, a status, an error or an integer) the
 * reply filter accepts. */
#define TM_REDIS_CAP_LINE_MAX 4096

/*
 * struct tm_redis_cap filters the RESP2 byte stream between the socket and
 * hiredis's reader: a bulk string longer than limit is never passed on
 * (nor kept); the reader gets in its place TM_REDIS_OVERSIZE followed by
 * "body of N bytes exceeds max_payload of LIMIT". Every item of RESP2 is
 * one line, except the payload of a bulk string, which follows its "$N"
 * line: so the filter needs no nesting, only whether it is in a line, in
 * a payload to pass on (pass) or in one to drop (drop).
 */
struct tm_rarena;

/* Bulk strings of at least this many bytes (within the limit) are built
 * by a filter with an arena straight in the arena (see struct
 * tm_redis_cap). */
#define TM_REDIS_CAP_DIRECT 4096

/*
 * With an arena (tm_redis_cap_init_in; the reader builds in it, see
 * tm_rarena_fns), the filter also takes the payload of every bulk string
 * of TM_REDIS_CAP_DIRECT bytes up to limit, and of every empty one, out
 * of the stream: the payload is written into a string of the arena (str,
 * by the filter or read there from the socket, see tm_redis_cap_room),
 * checked to end with CRLF, queued with tm_rarena_queue_string, and the
 * reader gets an empty bulk in its place. Large bodies are thus copied
 * once from the socket into the reply, not through the reader's buffer
 * and again into the reply.
 */
struct tm_redis_cap {
    size_t limit;
    size_t pass, drop;     /* payload bytes (CRLF included) left */
    size_t nline;          /* bytes of the line being read */
    struct tm_rarena *arena;  /* NULL: every bulk goes to the reader */
    char *str;             /* the string being filled, NULL: none */
    size_t str_len, str_have; /* its payload's length, bytes written */
    unsigned crlf;         /* bytes of the CRLF after it still to come */
    char line[TM_REDIS_CAP_LINE_MAX];
};

/* tm_redis_cap_init starts a filter at a reply boundary. */
void tm_redis_cap_init(struct tm_redis_cap *f, size_t limit);
/* tm_redis_cap_init_in starts a filter that builds large strings in a
 * (not NULL). */
void tm_redis_cap_init_in(struct tm_redis_cap *f, size_t limit,
                          struct tm_rarena *a);
/* tm_redis_cap_feed runs n bytes read from the socket through the filter
 * into the reader rd. -1 on a line over TM_REDIS_CAP_LINE_MAX, a string
 * taken out of the stream not followed by CRLF, or when the reader
 * refuses the bytes. */
int tm_redis_cap_feed(struct tm_redis_cap *f, redisReader *rd,
                      const char *in, size_t n);
/* tm_redis_cap_room returns how many payload bytes of the string being
 * filled are still to come, and sets *at to where they go: the caller
 * may read them from the socket there, and then says how many it read
 * with tm_redis_cap_filled (the bytes after them go to
 * tm_redis_cap_feed). 0 when no string is being filled. */
size_t tm_redis_cap_room(const struct tm_redis_cap *f, char **at);
/* tm_redis_cap_filled counts n bytes (at most the room) written at the
 * place tm_redis_cap_room gave. */
void tm_redis_cap_filled(struct tm_redis_cap *f, size_t n);

/* TM_REDIS_OVERSIZE starts the text that tm_rconn_get_reply_capped puts
 * in place of a bulk string over its limit; the reason follows it ("body
 * of N bytes exceeds max_payload of M"). A byte no JSON text starts
 * with. */
#define TM_REDIS_OVERSIZE "\x01"

struct tm_rconn;
struct tm_rconn_opts;
struct iovec;

/*
 * struct tm_rconn_fns is a connection's transport, as hiredis's
 * redisContextFuncs: the socket (TCP connect, deadlines, the output
 * buffer, the reader) is net.c's for every connection, and every read
 * and write of the connection's bytes goes through its table. The
 * caller that opens a connection chooses the table (o->fns): net.c
 * fills tm_rconn_tcp, tls.c tm_rtls_fns, and net.c names no TLS symbol.
 * NULL hooks (connect, settled, close) have nothing to do.
 */
struct tm_rconn_fns {
    /* connect starts the transport over c's connected socket before the
     * deadline (TLS: the handshake); 0, or -1 with the reason in buf. On
     * a failure c is closed, through close. */
    int (*connect)(struct tm_rconn *c, const struct tm_rconn_opts *o,
                   int64_t deadline, char *buf, size_t size);
    /* settled waits, once c->reader exists, for the server's verdict on
     * the transport (TLS: one PING); 0, or -1 with the reason in buf */
    int (*settled)(struct tm_rconn *c, char *buf, size_t size);
    /* readv reads at least one byte before the deadline into iov (a
     * transport that cannot scatter fills iov[0] only): the count, or -1
     * with c->err set */
    ssize_t (*readv)(struct tm_rconn *c, const struct iovec *iov,
                     int iovcnt, int64_t deadline);
    /* write writes all len bytes at p before the deadline: 0, or -1 with
     * c->err set */
    int (*write)(struct tm_rconn *c, const char *p, size_t len,
                 int64_t deadline);
    /* close frees the transport's state (c->priv) after the socket was
     * shut down, and clears c->priv */
    void (*close)(struct tm_rconn *c);
};

/* tm_rconn_tcp is plain TCP: reads and writes straight on the socket. */
extern const struct tm_rconn_fns tm_rconn_tcp;

/* struct tm_rconn_opts says where and how to connect. */
struct tm_rconn_opts {
    const char *host;
    int port;
    int64_t connect_timeout_ms;  /* TCP connect and TLS handshake */
    int64_t timeout_ms;          /* each reply after that */
    const struct tm_rconn_fns *fns; /* the transport (NULL: tm_rconn_tcp) */
    /* read by a TLS transport (tm_rtls_fns) only */
    const char *ca_file;         /* NULL: the system CA store */
    const char *cert_file;       /* client certificate, with key_file */
    const char *key_file;
    const char *server_name;     /* SNI and name verified; NULL: host */
    bool verify;                 /* verify the certificate and the name */
};

/* struct tm_rconn is one connection. Once err is nonzero the connection
 * is unusable (a reply may be half read): the caller closes it. */
struct tm_rconn {
    int fd;
    const struct tm_rconn_fns *fns; /* its transport, never NULL */
    void *priv;                  /* the transport's state (tls.c: its
                                    SSL *), NULL: none */
    redisReader *reader;
    char *out;                   /* formatted commands not yet sent */
    size_t outlen, outcap;
    int64_t timeout_ms;
    int err;                     /* a REDIS_ERR_* code, 0: usable */
    char errstr[256];
};

/* tm_rconn_open connects (and for TLS, handshakes and verifies). NULL
 * with the reason in buf. */
struct tm_rconn *tm_rconn_open(const struct tm_rconn_opts *o, char *buf,
                               size_t size);
/* tm_rconn_close shuts the socket down, then frees: a child of the fork
 * pool holds a copy of every descriptor, which would otherwise keep the
 * connection open on the server. NULL is ignored. */
void tm_rconn_close(struct tm_rconn *c);
void tm_rconn_set_timeout(struct tm_rconn *c, int64_t timeout_ms);

/* tm_rconn_append_argv / tm_rconn_append queue a command (argv, or a
 * hiredis format); 0, or -1 with c->err set. */
int tm_rconn_append_argv(struct tm_rconn *c, int argc, const char **argv,
                         const size_t *lens);
int tm_rconn_append(struct tm_rconn *c, const char *fmt, ...);
/* tm_rconn_send sends what is queued, without reading a reply (the
 * caller reads it later with the tm_rconn_get_reply functions); 0, or -1
 * with c->err set. */
int tm_rconn_send(struct tm_rconn *c);
/* tm_rconn_get_reply sends what is queued and reads the next reply:
 * 0 with *out set (the caller frees it with freeReplyObject), or -1 with
 * c->err set. */
int tm_rconn_get_reply(struct tm_rconn *c, redisReply **out);
/* tm_rconn_get_reply_capped is tm_rconn_get_reply for a connection that
 * pipelines nothing, except that no bulk string longer than limit is
 * ever buffered: it is read off the socket and dropped, and the reply
 * holds TM_REDIS_OVERSIZE and the reason in its place. Memory is thus
 * bounded by the count of entries asked for times limit. */
int tm_rconn_get_reply_capped(struct tm_rconn *c, size_t limit,
                              redisReply **out);
/* tm_rconn_get_reply_in is tm_rconn_get_reply_capped (limit 0: no cap)
 * building the reply in the arena a (NULL: malloc'd as usual). A reply
 * built in a is freed with a, never with freeReplyObject (see
 * tm_rarena_reply_free). */
int tm_rconn_get_reply_in(struct tm_rconn *c, size_t limit,
                          struct tm_rarena *a, redisReply **out);
/* tm_rconn_command_argv / tm_rconn_command run one command: its reply,
 * or NULL with c->err set. */
redisReply *tm_rconn_command_argv(struct tm_rconn *c, int argc,
                                  const char **argv, const size_t *lens);
redisReply *tm_rconn_command(struct tm_rconn *c, const char *fmt, ...);

/* For transports (tls.c): the connection's error and its waits. */

/* tm_rconn_set_err sets c->err and c->errstr, the one place they are
 * written. */
void tm_rconn_set_err(struct tm_rconn *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* tm_rconn_set_errno sets a REDIS_ERR_IO of "what: <errno e's text>". */
void tm_rconn_set_errno(struct tm_rconn *c, const char *what, int e);
/* tm_rconn_wait waits until c->fd is ready for events (POLLIN, POLLOUT)
 * or the deadline passes: 0 ready, or -1 with c->err set ("what: timed
 * out", or poll's error). */
int tm_rconn_wait(struct tm_rconn *c, short events, int64_t deadline,
                  const char *what);

#endif /* TASKMILL_REDIS_NET_H */
