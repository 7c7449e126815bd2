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

#include "util/log.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

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

/* mget_argv fills argv (n + 1 of them) with an MGET of the n dedup keys
 * of bt; keys receives the keys built (the caller frees them). */
static void mget_argv(struct tm_redis *rb, const struct tm_batch *bt,
                      const char **argv, char **keys)
{
    const struct tm_cfg_task *t = rb->tasks[bt->msgs[0].task_index].cfg;
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
    /* one MGET per batch with keys, in its task's slot (the dedup keys
     * join the queue's slot: the one-slot rule), all pipelined */
    size_t asked = 0, nkeys = 0;
    for (size_t b = 0; b < nb; b++) {
        size_t n = batch_keys(rb, out[b]);
        asked += n > 0;
        nkeys += n;
    }
    if (asked == 0)
        return;
    struct tm_redis_cmd *cmds = tm_calloc(asked, sizeof *cmds);
    size_t *bi = tm_calloc(asked, sizeof *bi);
    const char **argv = tm_calloc(nkeys + asked, sizeof *argv);
    char **keys = tm_calloc(nkeys, sizeof *keys);
    size_t c = 0, a = 0, k = 0;
    for (size_t b = 0; b < nb; b++) {
        size_t n = batch_keys(rb, out[b]);
        if (n == 0)
            continue;
        mget_argv(rb, out[b], &argv[a], &keys[k]);
        cmds[c] = (struct tm_redis_cmd){
            .slot = rb->tasks[out[b]->msgs[0].task_index].slot,
            .argc = (int)(n + 1), .argv = &argv[a]};
        bi[c++] = b;
        a += n + 1;
        k += n;
    }
    char eb[256];
    eb[0] = '\0';
    int rc = tm_redis_link_pipe(rb, &l->link, cmds, asked, eb, sizeof eb);
    size_t bad = nb; /* the first batch whose look-up failed */
    for (c = 0; c < asked; c++) {
        const redisReply *r = cmds[c].reply;
        if (r != NULL && r->type != REDIS_REPLY_ERROR) {
            mark(out[bi[c]], r, (size_t)cmds[c].argc - 1);
            continue;
        }
        if (bad == nb) {
            bad = bi[c];
            if (r != NULL)
                tm_snprintf(eb, sizeof eb, "%s", r->str);
        }
    }
    if (bad < nb)
        tm_log_write(TM_LOG_WARNING, SRC,
                     rb->tasks[out[bad]->msgs[0].task_index].cfg->name, NULL,
                     "dedup look-up failed: %s; the batch runs, and a "
                     "second success of one key still counts as a "
                     "duplicate", eb);
    if (rc != 0)
        l->was_up = 0; /* the link opens its connection again */
    tm_redis_cmds_free(cmds, asked);
    for (size_t i = 0; i < nkeys; i++)
        tm_free(keys[i]);
    tm_free(keys);
    tm_free(argv);
    tm_free(bi);
    tm_free(cmds);
}
