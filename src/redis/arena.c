/* arena.c - hiredis reply trees built in one arena per read. */
#include "redis/arena.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/util.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define TM_ARENA_ASAN 1
#else
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define TM_ARENA_ASAN 0
#endif

/* Every object starts on this alignment. */
#define TM_ARENA_ALIGN 16
/* The first block's bytes; each next one doubles, up to TM_ARENA_MAX. */
#define TM_ARENA_FIRST (16 * 1024)
#define TM_ARENA_MAX (1024 * 1024)
/* Freed blocks the process keeps for its next arenas, in bytes at most:
 * a read's blocks come back as the next read's (fresh blocks from malloc
 * are fresh pages often, each a page fault); see tm_rarena_trim. Room
 * for a read of large bodies (COUNT entries of 64 KiB and more), whose
 * blocks would otherwise go back to the system and come again faulted
 * at every read. */
#define TM_ARENA_CACHE (32 * 1024 * 1024)
/* The cache's lists, by size class: class k holds blocks of 2^k to
 * 2^(k+1) - 1 bytes. */
#define TM_ARENA_CLASSES 48
/* Under ASan, the poisoned gap left after each object: a read or write
 * past an object's end lands in it and is reported. */
#define TM_ARENA_GAP (TM_ARENA_ASAN ? TM_ARENA_ALIGN : 0)

/* struct block is one malloc'd block; objects are bump-allocated from
 * data[used .. size). Under ASan, data[used .. size) stays poisoned. */
struct block {
    struct block *next;
    size_t size, used;
    _Alignas(TM_ARENA_ALIGN) unsigned char data[];
};

/* struct queued is a string built outside the reader (see
 * tm_rarena_queue_string), waiting for its place in the tree. */
struct queued {
    struct queued *next;
    char *str;
    size_t len;
};

struct tm_rarena {
    atomic_uint refs;
    struct block *cur;   /* the block allocated from, head of the list */
    size_t next_size;    /* the size of the next block grown */
    struct queued *qhead, *qtail; /* strings to come, in stream order */
};

/* The freed blocks kept for reuse: one cache for the process, because
 * the thread that frees an arena (the settle thread, with the last batch
 * of a read) is not the one that builds the next (a lane). A lock per
 * block taken or given back: a few per read, never per message. The
 * cache holds at most TM_ARENA_CACHE bytes, so it fills up within the
 * first reads and then stays that size: no growth over a long run. A
 * block is found in its size class, or any larger one, without a walk
 * over the blocks of other sizes. */
static struct {
    pthread_mutex_t mu;
    struct block *head[TM_ARENA_CLASSES];
    size_t bytes;
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* class_of is the size class of a block of size bytes (size > 0). */
static unsigned class_of(size_t size)
{
    unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)size);
    return k < TM_ARENA_CLASSES ? k : TM_ARENA_CLASSES - 1;
}

/* cache_take takes a cached block of at least size bytes, or NULL: one
 * of its class that is large enough, else the first of a larger class
 * (all large enough). */
static struct block *cache_take(size_t size)
{
    struct block *found = NULL;
    unsigned k = class_of(size);
    pthread_mutex_lock(&cache.mu);
    for (struct block **pp = &cache.head[k]; *pp != NULL;
         pp = &(*pp)->next) {
        if ((*pp)->size >= size) {
            found = *pp;
            *pp = found->next;
            break;
        }
    }
    for (unsigned j = k + 1; found == NULL && j < TM_ARENA_CLASSES; j++) {
        if (cache.head[j] != NULL) {
            found = cache.head[j];
            cache.head[j] = found->next;
        }
    }
    if (found != NULL)
        cache.bytes -= found->size;
    pthread_mutex_unlock(&cache.mu);
    return found;
}

/* block_free keeps b in the cache while it has room, else frees it. A
 * cached block is all poisoned under ASan, as when new. */
static void block_free(struct block *b)
{
    ASAN_POISON_MEMORY_REGION(b->data, b->size);
    unsigned k = class_of(b->size);
    pthread_mutex_lock(&cache.mu);
    int keep = cache.bytes + b->size <= TM_ARENA_CACHE;
    if (keep) {
        b->next = cache.head[k];
        cache.head[k] = b;
        cache.bytes += b->size;
    }
    pthread_mutex_unlock(&cache.mu);
    if (!keep) {
        ASAN_UNPOISON_MEMORY_REGION(b->data, b->size);
        tm_free(b);
    }
}

void tm_rarena_trim(void)
{
    struct block *heads[TM_ARENA_CLASSES];
    pthread_mutex_lock(&cache.mu);
    memcpy(heads, cache.head, sizeof heads);
    memset(cache.head, 0, sizeof cache.head);
    cache.bytes = 0;
    pthread_mutex_unlock(&cache.mu);
    for (unsigned k = 0; k < TM_ARENA_CLASSES; k++) {
        struct block *b = heads[k];
        while (b != NULL) {
            struct block *next = b->next;
            ASAN_UNPOISON_MEMORY_REGION(b->data, b->size);
            tm_free(b);
            b = next;
        }
    }
}

struct tm_rarena *tm_rarena_new(void)
{
    struct tm_rarena *a = tm_calloc(1, sizeof *a);
    atomic_init(&a->refs, 1);
    a->next_size = TM_ARENA_FIRST;
    return a;
}

void tm_rarena_ref(struct tm_rarena *a)
{
    atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
}

void tm_rarena_unref(struct tm_rarena *a)
{
    if (a == NULL)
        return;
    /* release: every use of the tree by this holder comes before the
     * free by the last one (acquire) */
    unsigned was = atomic_fetch_sub_explicit(&a->refs, 1,
                                             memory_order_acq_rel);
    assert(was > 0);
    if (was != 1)
        return;
    struct block *b = a->cur;
    while (b != NULL) {
        struct block *next = b->next;
        block_free(b);
        b = next;
    }
    tm_free(a);
}

/* grow links a new block of at least need bytes in. An object of over a
 * quarter of the usual block gets a block of its own, behind the
 * current one, so that the current one's room is not wasted. */
static struct block *grow(struct tm_rarena *a, size_t need)
{
    int own = need > a->next_size / 4;
    size_t size = own ? need : a->next_size;
    struct block *b = cache_take(size);
    if (b == NULL) {
        b = tm_malloc(sizeof *b + size);
        b->size = size;
        ASAN_POISON_MEMORY_REGION(b->data, size);
    }
    /* a cached block much larger than the object asked for becomes the
     * current block, its room used by the next objects */
    if (own && b->size - need >= a->next_size)
        own = 0;
    b->used = 0;
    if (own && a->cur != NULL) {
        b->next = a->cur->next;
        a->cur->next = b;
    } else {
        b->next = a->cur;
        a->cur = b;
        if (a->next_size < TM_ARENA_MAX)
            a->next_size *= 2;
    }
    return b;
}

/* alloc_raw returns n bytes, aligned on TM_ARENA_ALIGN, not zeroed. */
static void *alloc_raw(struct tm_rarena *a, size_t n)
{
    assert(atomic_load_explicit(&a->refs, memory_order_relaxed) > 0);
    size_t need = (n + TM_ARENA_GAP + TM_ARENA_ALIGN - 1) &
                  ~(size_t)(TM_ARENA_ALIGN - 1);
    struct block *b = a->cur;
    if (b == NULL || b->size - b->used < need)
        b = grow(a, need);
    void *p = b->data + b->used;
    b->used += need;
    ASAN_UNPOISON_MEMORY_REGION(p, n);
    return p;
}

/* alloc returns n bytes, zeroed, aligned on TM_ARENA_ALIGN. */
static void *alloc(struct tm_rarena *a, size_t n)
{
    void *p = alloc_raw(a, n);
    memset(p, 0, n);
    return p;
}

/* new_obj makes the object of task t and links it into its parent. */
static redisReply *new_obj(const redisReadTask *t, int type)
{
    struct tm_rarena *a = t->privdata;
    assert(a != NULL);
    redisReply *r = alloc(a, sizeof *r);
    r->type = type;
    if (t->parent != NULL) {
        redisReply *parent = t->parent->obj;
        assert(parent->type == REDIS_REPLY_ARRAY &&
               (size_t)t->idx < parent->elements);
        parent->element[t->idx] = r;
    }
    return r;
}

static void *create_string(const redisReadTask *t, char *str, size_t len)
{
    assert(t->type == REDIS_REPLY_ERROR || t->type == REDIS_REPLY_STATUS ||
           t->type == REDIS_REPLY_STRING);
    struct tm_rarena *a = t->privdata;
    redisReply *r = new_obj(t, t->type);
    if (t->type == REDIS_REPLY_STRING && len == 0 && a->qhead != NULL) {
        /* the empty bulk stands for the first string queued */
        struct queued *q = a->qhead;
        a->qhead = q->next;
        if (a->qhead == NULL)
            a->qtail = NULL;
        r->str = q->str;
        r->len = q->len;
        return r;
    }
    char *s = alloc_raw(a, len + 1); /* all written here */
    memcpy(s, str, len);
    s[len] = '\0';
    r->str = s;
    r->len = len;
    return r;
}

static void *create_array(const redisReadTask *t, int elements)
{
    /* the vector first: new_obj may link r into a parent at once */
    redisReply **v = NULL;
    if (elements > 0)
        v = alloc(t->privdata, (size_t)elements * sizeof *v);
    redisReply *r = new_obj(t, REDIS_REPLY_ARRAY);
    r->element = v;
    r->elements = elements > 0 ? (size_t)elements : 0;
    return r;
}

static void *create_integer(const redisReadTask *t, long long value)
{
    redisReply *r = new_obj(t, REDIS_REPLY_INTEGER);
    r->integer = value;
    return r;
}

static void *create_nil(const redisReadTask *t)
{
    return new_obj(t, REDIS_REPLY_NIL);
}

/* the reader frees a half-built reply on a protocol error: the arena
 * keeps it until its last reference goes */
static void free_object(void *r)
{
    (void)r;
}

redisReplyObjectFunctions tm_rarena_fns = {
    .createString = create_string,
    .createArray = create_array,
    .createInteger = create_integer,
    .createNil = create_nil,
    .freeObject = free_object,
};

void tm_rarena_reply_free(redisReply *r, struct tm_rarena *a)
{
    if (a == NULL && r != NULL)
        freeReplyObject(r);
}

char *tm_rarena_string(struct tm_rarena *a, size_t len)
{
    char *s = alloc_raw(a, len + 1);
    s[len] = '\0';
    return s;
}

void tm_rarena_queue_string(struct tm_rarena *a, char *s, size_t len)
{
    struct queued *q = alloc_raw(a, sizeof *q);
    q->next = NULL;
    q->str = s;
    q->len = len;
    if (a->qtail != NULL)
        a->qtail->next = q;
    else
        a->qhead = q;
    a->qtail = q;
}

int tm_rarena_queued(const struct tm_rarena *a)
{
    return a->qhead != NULL;
}

void tm_rarena_unqueue(struct tm_rarena *a)
{
    a->qhead = a->qtail = NULL;
}
