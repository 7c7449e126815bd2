/* settle.c - Redis settlement: ack, retry, dead-letter. */
#include "redis/redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define SRC TM_REDIS_SRC

/* Dead-letter one entry atomically: XADD to the dead-letter stream, then
 * XACK the original. If XADD fails the script stops before XACK, so the
 * entry stays pending rather than being lost; if the daemon dies after
 * the script, nothing is duplicated.
 * KEYS: stream, dlq. ARGV: group, id, then field/value pairs. */
static const char dead_script[] =
    "local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))\n"
    "redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
    "return id\n";


static void argv_reserve(struct tm_redis *rb, size_t n)
{
    if (n <= rb->argcap)
        return;
    size_t cap = rb->argcap ? rb->argcap : 64;
    while (cap < n)
        cap *= 2;
    rb->argv = tm_realloc(rb->argv, cap * sizeof *rb->argv);
    rb->argvlen = tm_realloc(rb->argvlen, cap * sizeof *rb->argvlen);
    rb->argcap = cap;
}

/* append_dead queues the dead-letter script for m. */
static void append_dead(struct tm_redis *rb, struct tm_msg *m)
{
    const struct tm_cfg_task *t = rb->tasks[m->task_index].cfg;
    char attempts[24], failed_at[24];
    tm_snprintf(attempts, sizeof attempts, "%u",
                m->outcome == TM_OUT_INVALID ? 0u : m->attempt);
    tm_snprintf(failed_at, sizeof failed_at, "%lld",
                (long long)tm_wall_ms());
    const char *err = m->error != NULL ? m->error : "";
    const char *argv[] = {"EVAL", dead_script, "2", t->queue, t->dead_letter,
                          t->group, m->id,
                          "body", m->body != NULL ? m->body : "",
                          "task", t->name,
                          "error", err,
                          "attempts", attempts,
                          "failed_at", failed_at,
                          "origin_id", m->id};
    size_t lens[sizeof argv / sizeof argv[0]];
    for (size_t i = 0; i < sizeof argv / sizeof argv[0]; i++)
        lens[i] = strlen(argv[i]);
    lens[8] = m->body != NULL ? m->body_len : 0;
    redisAppendCommandArgv(rb->wc, (int)(sizeof argv / sizeof argv[0]),
                           argv, lens);
}

size_t tm_redis_settle(struct tm_broker *b, struct tm_msg **msgs,
                        size_t n)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    char eb[256];

    /* retries need no command: the entry stays pending on this consumer
     * and is claimed again when due (see tm_redis_fetch). The messages that do
     * (acks, dead letters) move to the front; replies are matched to them
     * by position. */
    size_t work = 0;
    for (size_t i = 0; i < n; i++) {
        struct tm_msg *m = msgs[i];
        if (m->settle == TM_SETTLE_RETRY) {
            struct tm_redis_retry e = {.due_ms = tm_now_ms() + m->retry_delay_ms,
                                 .attempt = m->attempt + 1};
            tm_snprintf(e.id, sizeof e.id, "%s", m->id);
            tm_redis_retry_push(&rb->tasks[m->task_index], &e);
        } else if (m->settle == TM_SETTLE_ACK ||
                   m->settle == TM_SETTLE_DEAD) {
            msgs[i] = msgs[work];
            msgs[work++] = m;
        }
    }
    if (work == 0)
        return 0;
    if (tm_redis_wc_ready(rb, eb, sizeof eb) != 0)
        goto lost;

    /* one pipeline: dead letters, then one XACK per task per chunk */
    size_t ncmds = 0;
    for (size_t i = 0; i < work; i++) {
        if (msgs[i]->settle == TM_SETTLE_DEAD) {
            append_dead(rb, msgs[i]);
            ncmds++;
        }
    }
    size_t ndead = ncmds;
    for (size_t ti = 0; ti < rb->ntasks; ti++) {
        const struct tm_cfg_task *t = rb->tasks[ti].cfg;
        size_t argc = 0;
        argv_reserve(rb, 3 + TM_REDIS_ACK_CHUNK);
        for (size_t i = 0; i <= work; i++) {
            int flush = i == work || argc == 3 + TM_REDIS_ACK_CHUNK;
            if (flush && argc > 3) {
                redisAppendCommandArgv(rb->wc, (int)argc, rb->argv,
                                       rb->argvlen);
                ncmds++;
                argc = 0;
            }
            if (i == work)
                break;
            struct tm_msg *m = msgs[i];
            if (m->task_index != ti || m->settle != TM_SETTLE_ACK)
                continue;
            if (argc == 0) {
                rb->argv[0] = "XACK";
                rb->argvlen[0] = 4;
                rb->argv[1] = t->queue;
                rb->argvlen[1] = strlen(t->queue);
                rb->argv[2] = t->group;
                rb->argvlen[2] = strlen(t->group);
                argc = 3;
            }
            rb->argv[argc] = m->id;
            rb->argvlen[argc] = m->id_len;
            argc++;
        }
    }

    /* replies come in the order of the commands: the dead letters first,
     * in the order of msgs, then the acks */
    size_t next_dead = 0;
    for (size_t c = 0; c < ncmds; c++) {
        void *vr = NULL;
        if (redisGetReply(rb->wc, &vr) != REDIS_OK) {
            tm_snprintf(eb, sizeof eb, "%s", rb->wc->errstr);
            goto lost;
        }
        redisReply *r = vr;
        struct tm_msg *m = NULL;
        if (c < ndead) {
            while (msgs[next_dead]->settle != TM_SETTLE_DEAD)
                next_dead++;
            m = msgs[next_dead++];
        }
        if (r->type == REDIS_REPLY_ERROR) {
            /* a dead letter the broker refused stays pending, to be
             * claimed again; an XACK error is only logged */
            tm_log_write(TM_LOG_ERR, SRC,
                         m != NULL ? rb->tasks[m->task_index].cfg->name
                                   : NULL,
                         m != NULL ? m->id : NULL, "%s failed: %s",
                         m != NULL ? "dead-letter" : "XACK", r->str);
        }
        freeReplyObject(r);
    }
    if (!rb->wc_was_up) {
        rb->wc_was_up = 1;
        tm_redis_mark_up(rb);
    }
    return 0;

lost:
    tm_redis_wc_lost(rb, "settle", eb);
    return work; /* msgs[0..work): none confirmed */
}
