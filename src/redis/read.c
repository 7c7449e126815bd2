/* read.c - what every intake read shares (claim.c's scripted reads,
 * readahead.c's new entries, intake.c's fetch): a reply's entries made a
 * batch on the task's held list, the batch's release (to the task's
 * garbage, freed by the intake before its next read), the ids the task
 * holds, a failed read (the lane's connection closed, a lost group made
 * sure of again), one command on the lane's connection, and when the
 * task next needs a look outside the blocking read. Below every read: it
 * calls none of them. */
#include "redis/redis.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "util/log.h"
#include "redis/arena.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

static void free_batch(struct tm_batch *b)
{
    struct tm_redis_held *h = b->owner;
    tm_rarena_reply_free(h->reply, h->arena);
    tm_rarena_unref(h->arena);
    tm_free(h);
    tm_free(b);
}

/* cb_release_reply runs on whichever thread settles a batch's last
 * message (the settle thread, mostly). The batch leaves the task's held
 * list at once: none of its ids is this process's any more. The reply
 * tree was allocated by the task's intake thread, entry by entry; freeing
 * it there again is much cheaper for malloc than freeing it across
 * threads, so the batch goes on the task's garbage stack, which the
 * intake empties before its next read. The stack links batches through
 * their first message. */
static void cb_release_reply(struct tm_batch *b)
{
    struct tm_redis_task *rt = b->msgs[0].bctx;
    struct tm_redis_held *h = b->owner;
    pthread_mutex_lock(&rt->held_mu);
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        rt->held = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
    pthread_mutex_unlock(&rt->held_mu);
    struct tm_msg *head = &b->msgs[0];
    struct tm_msg *old = atomic_load_explicit(&rt->garbage,
                                              memory_order_relaxed);
    do {
        head->next = old;
    } while (!atomic_compare_exchange_weak_explicit(
        &rt->garbage, &old, head, memory_order_release,
        memory_order_relaxed));
}

/* tm_redis_collect frees the batches settled since the last read. */
void tm_redis_collect(struct tm_redis_task *rt)
{
    struct tm_msg *m = atomic_exchange_explicit(&rt->garbage, NULL,
                                                memory_order_acquire);
    while (m != NULL) {
        struct tm_msg *next = m->next;
        free_batch(m->batch);
        m = next;
    }
}

/* fill_msg points m at one entry: [id, [field, value, ...]] as Redis
 * reads it, or [id, fields, reason or nil, deliveries] as the take
 * scripts return it (reason: the body was stripped). */
static int fill_msg(struct tm_msg *m, const redisReply *e)
{
    if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING)
        return -1;
    m->id = e->element[0]->str;
    m->id_len = e->element[0]->len;
    m->attempt = 1;
    if (e->elements >= 4 && e->element[3]->type == REDIS_REPLY_INTEGER &&
        e->element[3]->integer > 0)
        m->attempt = (unsigned)e->element[3]->integer;
    if (e->elements >= 3 && e->element[2]->type == REDIS_REPLY_STRING) {
        m->invalid = e->element[2]->str;
        return 0;
    }
    const redisReply *f = e->element[1];
    if (f->type != REDIS_REPLY_ARRAY) {
        m->invalid = "the entry has no fields";
        return 0;
    }
    int has_body = 0;
    const redisReply *tp = NULL, *ts = NULL;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        if (!has_body && k->len == 4 && memcmp(k->str, "body", 4) == 0) {
            has_body = 1;
            if (v->len > sizeof TM_REDIS_OVERSIZE - 1 &&
                memcmp(v->str, TM_REDIS_OVERSIZE,
                       sizeof TM_REDIS_OVERSIZE - 1) == 0)
                /* dropped by the capped read: the reason is left */
                m->invalid = v->str + sizeof TM_REDIS_OVERSIZE - 1;
            else {
                m->body = v->str;
                m->body_len = v->len;
            }
        } else if (k->len == 11 && memcmp(k->str, "traceparent", 11) == 0) {
            tp = v;
        } else if (k->len == 10 && memcmp(k->str, "tracestate", 10) == 0) {
            ts = v;
        } else {
            tm_redis_meta_field(m, k, v);
        }
    }
    /* both fields read, in whichever order the producer wrote them */
    if (tp != NULL)
        tm_msg_set_trace(m, tp->str, tp->len, ts != NULL ? ts->str : NULL,
                         ts != NULL ? ts->len : 0);
    if (!has_body)
        m->invalid = "the entry has no body field";
    return 0;
}

/* tm_redis_entries_batch makes a batch of the entries array, owning reply
 * (built in arena, which the batch then holds a reference to, or malloc'd when
 * arena is NULL), and puts it on the task's held list. Entries that are
 * not well-formed are skipped. Returns NULL (reply freed) when empty. */
struct tm_batch *tm_redis_entries_batch(struct tm_redis_task *rt,
                                        redisReply *reply,
                                        struct tm_rarena *arena,
                                        const redisReply *entries,
                                        size_t task_index)
{
    size_t n = 0;
    for (size_t i = 0; i < entries->elements; i++)
        if (entries->element[i]->type == REDIS_REPLY_ARRAY)
            n++;
    if (n == 0) {
        tm_rarena_reply_free(reply, arena);
        return NULL;
    }
    struct tm_batch *b = tm_batch_new(n);
    struct tm_redis_held *h = tm_calloc(1, sizeof *h + n);
    h->reply = reply;
    h->arena = arena;
    if (arena != NULL)
        tm_rarena_ref(arena);
    h->batch = b;
    h->seq = rt->reads++;
    b->owner = h;
    b->release = cb_release_reply;
    size_t k = 0;
    int64_t now = tm_now_ns();
    for (size_t i = 0; i < entries->elements && k < n; i++) {
        struct tm_msg *m = &b->msgs[k];
        if (fill_msg(m, entries->element[i]) != 0)
            continue;
        m->task_index = task_index;
        m->bctx = rt;
        m->t_recv_ns = now;
        k++;
    }
    if (k == 0) {
        free_batch(b);
        return NULL;
    }
    if (k < n) {
        /* malformed entries were skipped: shrink the count */
        atomic_store(&b->refs, (unsigned)k);
        b->n = k;
    }
    pthread_mutex_lock(&rt->held_mu);
    h->next = rt->held;
    if (rt->held != NULL)
        rt->held->prev = h;
    rt->held = h;
    pthread_mutex_unlock(&rt->held_mu);
    return b;
}

/* tm_redis_intake_failed closes the lane's connection after a failure of task
 * rt's read (the lane reconnects on its next fetch). */
void tm_redis_intake_failed(struct tm_redis *rb, struct tm_redis_task *rt,
                            const char *what)
{
    struct tm_redis_lane *l = rt->lane;
    if (rt->was_up || atomic_load(&rb->base.up))
        tm_log_write(TM_LOG_WARNING, SRC, rt->cfg->name, NULL,
                     "%s: %s; reconnecting", what, rt->errstr);
    rt->was_up = 0;
    l->was_up = 0;
    tm_redis_mark_down(rb);
    atomic_store(&l->client_id, 0);
    tm_redis_link_close(rb, &l->link);
}

/* tm_redis_group_lost says whether err refused a read because a stream or
 * group it reads is gone: NOGROUP, or a blocked read ended by the deletion of
 * its stream (the connection is fine in both cases). */
int tm_redis_group_lost(const char *err)
{
    return strstr(err, "NOGROUP") != NULL ||
           (strncmp(err, "UNBLOCKED", 9) == 0 &&
            strstr(err, TM_REDIS_KEY_GONE) != NULL);
}

/* tm_redis_regroup handles a read of the tasks ti[0 .. k) refused by
 * tm_redis_group_lost: which of their groups is gone the error may not say
 * (NOGROUP names the first stream it found without one, an ended block none),
 * so each of them is made sure of again before the next read, and task_ready
 * warns for the ones it had to create again. */
void tm_redis_regroup(struct tm_redis *rb, struct tm_redis_lane *l,
                      const char *err, const size_t *ti, size_t k)
{
    for (size_t i = 0; i < k; i++)
        rb->tasks[ti[i]].group_gen = l->link.gen - 1;
    tm_log_write(TM_LOG_DEBUG, SRC, rb->tasks[ti[0]].cfg->name, NULL,
                 "read of %zu stream(s) refused: %s; making sure of their "
                 "groups again", k, err);
}

/* tm_redis_read_failed handles a failed read of task rt alone: a deleted
 * stream or group is created again on the next call (0; task_ready warns);
 * anything else is a lost connection or a broker refusing the read (-1:
 * reconnect with backoff). */
int tm_redis_read_failed(struct tm_redis *rb, struct tm_redis_task *rt,
                         const char *what)
{
    if (tm_redis_group_lost(rt->errstr)) {
        size_t ti = (size_t)(rt - rb->tasks);
        tm_redis_regroup(rb, rt->lane, rt->errstr, &ti, 1);
        return 0;
    }
    tm_redis_intake_failed(rb, rt, what);
    return -1;
}

/* tm_redis_intake_command runs one command on the intake connection, reading
 * its reply capped at max_payload, built in arena (NULL: malloc'd). Returns
 * the reply, or NULL with the reason in rt->errstr (and *dead = 1 when
 * the connection is unusable); an error reply is returned as NULL too. */
redisReply *tm_redis_intake_command(struct tm_redis_task *rt, int argc,
                                    const char **argv, struct tm_rarena *arena,
                                    int64_t timeout_ms, int *dead)
{
    struct tm_redis_lane *l = rt->lane;
    /* no reply of a read ahead is due before this one's */
    assert(!l->ahead);
    return tm_redis_link_run_in(l->rb, &l->link, rt->slot, argc, argv, NULL,
                                rt->cfg->max_payload, arena, timeout_ms,
                                rt->errstr, sizeof rt->errstr, dead);
}

/* tm_redis_held_ids: see redis.h. The held list is filled by
 * tm_redis_entries_batch and emptied by cb_release_reply, above. */
size_t tm_redis_held_ids(struct tm_redis_task *rt, int settled_too,
                         char (**ids)[TM_REDIS_ID_MAX], size_t *cap)
{
    size_t n = 0;
    pthread_mutex_lock(&rt->held_mu);
    for (const struct tm_redis_held *h = rt->held; h != NULL; h = h->next) {
        const struct tm_batch *b = h->batch;
        for (size_t i = 0; i < b->n; i++) {
            if (h->settled[i] && !settled_too)
                continue;
            if (n == *cap) {
                *cap = *cap ? *cap * 2 : 64;
                *ids = tm_realloc(*ids, *cap * sizeof **ids);
            }
            tm_snprintf((*ids)[n], sizeof (*ids)[n], "%s", b->msgs[i].id);
            n++;
        }
    }
    pthread_mutex_unlock(&rt->held_mu);
    return n;
}

/* tm_redis_next_look is when the task next needs a look outside the blocking
 * read: its next due retry, or its next reclaim round. */
int64_t tm_redis_next_look(const struct tm_redis_task *rt)
{
    int64_t hint = atomic_load(&rt->retry_hint_ms);
    int64_t until = rt->next_due_ms < hint ? rt->next_due_ms : hint;
    if (rt->history_done && rt->reclaimable && rt->next_maint_ms < until)
        until = rt->next_maint_ms;
    return until;
}
