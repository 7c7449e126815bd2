/* dedup.c - Redis deduplication: which messages of a read already
 * succeeded under their dedup key (lane thread).
 *
 * A task with dedup_ttl > 0 keeps one key per dedup key that succeeded,
 * "<queue>.dedup.<key>" (in the queue's slot: a cluster config gives the
 * queue a hash tag), holding the first success's result and expiring
 * after dedup_ttl. The settle script sets it, only when it does not
 * exist yet (reply.c). Intake looks the keys of a batch up with one MGET
 * per batch, all batches of a read in one pipeline: no round trip per
 * message, none at all for a batch without dedup keys. A message whose
 * key exists is marked duplicate: the daemon settles it without running
 * it, and its answer (when it is a request) carries the stored result.
 *
 * Two copies read before either succeeded both run; the settle script
 * records the first success and turns the later one into a duplicate, so
 * one key never counts two successes within dedup_ttl. A failed run sets
 * nothing: the next copy runs. When the look-up fails, the batch runs as
 * it is: the settle script is the check that always holds. */
#include "redis/redis.h"

#include <string.h>

#include "log.h"
#include "util.h"

#define SRC TM_REDIS_SRC

char *tm_redis_dedup_key(const struct tm_cfg_task *t, const char *key,
                         size_t len)
{
    return tm_asprintf("%s.dedup.%.*s", t->queue, (int)len, key);
}

/* batch_keys says how many messages of bt carry a dedup key to look up:
 * those of a task with dedup_ttl whose body is not known bad. */
static size_t batch_keys(const struct tm_redis *rb, const struct tm_batch *bt)
{
    const struct tm_cfg_task *t = rb->tasks[bt->msgs[0].task_index].cfg;
    size_t n = 0;
    if (t->dedup_ttl_ms <= 0)
        return 0;
    for (size_t i = 0; i < bt->n; i++)
        if (bt->msgs[i].dedup_key != NULL && bt->msgs[i].invalid == NULL)
            n++;
    return n;
}

/* append_mget queues one MGET of the n dedup keys of bt. */
static void append_mget(struct tm_redis *rb, struct tm_rconn *c,
                        const struct tm_batch *bt, size_t n)
{
    const struct tm_cfg_task *t = rb->tasks[bt->msgs[0].task_index].cfg;
    const char **argv = tm_calloc(n + 1, sizeof *argv);
    char **keys = tm_calloc(n, sizeof *keys);
    size_t k = 0;
    argv[0] = "MGET";
    for (size_t i = 0; i < bt->n; i++) {
        const struct tm_msg *m = &bt->msgs[i];
        if (m->dedup_key == NULL || m->invalid != NULL)
            continue;
        keys[k] = tm_redis_dedup_key(t, m->dedup_key, m->dedup_key_len);
        argv[1 + k] = keys[k];
        k++;
    }
    tm_rconn_append_argv(c, (int)(n + 1), argv, NULL);
    for (size_t i = 0; i < n; i++)
        tm_free(keys[i]);
    tm_free(keys);
    tm_free(argv);
}

/* mark marks the messages of bt whose key the MGET reply r found. */
static size_t mark(struct tm_batch *bt, const redisReply *r, size_t n)
{
    size_t k = 0, dups = 0;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != n)
        return 0;
    for (size_t i = 0; i < bt->n; i++) {
        struct tm_msg *m = &bt->msgs[i];
        if (m->dedup_key == NULL || m->invalid != NULL)
            continue;
        const redisReply *v = r->element[k++];
        if (v->type != REDIS_REPLY_STRING)
            continue; /* nil: not done yet */
        m->duplicate = 1;
        m->result = tm_strndup(v->str, v->len);
        m->result_len = v->len;
        dups++;
    }
    return dups;
}

void tm_redis_dedup_check(struct tm_redis *rb, struct tm_redis_lane *l,
                          struct tm_batch **out, size_t nb)
{
    struct tm_rconn *c = l->rc;
    size_t asked = 0;
    if (c == NULL)
        return;
    for (size_t b = 0; b < nb; b++) {
        size_t n = batch_keys(rb, out[b]);
        if (n > 0) {
            append_mget(rb, c, out[b], n);
            asked++;
        }
    }
    if (asked == 0)
        return;
    char eb[256];
    eb[0] = '\0';
    size_t bad = 0; /* the batch whose look-up failed */
    for (size_t b = 0; b < nb && asked > 0; b++) {
        size_t n = batch_keys(rb, out[b]);
        if (n == 0)
            continue;
        asked--;
        redisReply *r = NULL;
        if (tm_rconn_get_reply(c, &r) != 0) {
            tm_redis_reply_error(c, NULL, eb, sizeof eb);
            bad = b;
            break;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            tm_snprintf(eb, sizeof eb, "%s", r->str);
            bad = b;
        } else {
            mark(out[b], r, n);
        }
        freeReplyObject(r);
    }
    if (eb[0] != '\0')
        tm_log_write(TM_LOG_WARNING, SRC,
                     rb->tasks[out[bad]->msgs[0].task_index].cfg->name, NULL,
                     "dedup look-up failed: %s; the batch runs, and a "
                     "second success of one key still counts as a "
                     "duplicate", eb);
    if (c->err != 0) {
        /* replies half read: the lane opens a new connection */
        atomic_store(&l->client_id, 0);
        tm_rconn_close(l->rc);
        l->rc = NULL;
        l->was_up = 0;
    }
}
