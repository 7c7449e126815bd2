/* arena.c - hiredis reply trees built in one arena per read. */
#include "redis/arena.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util.h"

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
 * are fresh pages often, each a page fault); see tm_rarena_trim. */
#define TM_ARENA_CACHE (1024 * 1024)
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

struct tm_rarena {
    atomic_uint refs;
    struct block *cur;   /* the block allocated from, head of the list */
    size_t next_size;    /* the size of the next block grown */
};

/* The freed blocks kept for reuse: one list for the process, because
 * the thread that frees an arena (the settle thread, with the last batch
 * of a read) is not the one that builds the next (a lane). A lock per
 * block taken or given back: a few per read, never per message. The
 * list holds at most TM_ARENA_CACHE bytes, so it fills up within the
 * first reads and then stays that size: no growth over a long run. */
static struct {
    pthread_mutex_t mu;
    struct block *head;
    size_t bytes;
} cache = {PTHREAD_MUTEX_INITIALIZER, NULL, 0};

/* cache_take takes a cached block of at least size bytes, or NULL. */
static struct block *cache_take(size_t size)
{
    struct block *found = NULL;
    pthread_mutex_lock(&cache.mu);
    for (struct block **pp = &cache.head; *pp != NULL; pp = &(*pp)->next) {
        struct block *b = *pp;
        if (b->size >= size) {
            *pp = b->next;
            cache.bytes -= b->size;
            found = b;
            break;
        }
    }
    pthread_mutex_unlock(&cache.mu);
    return found;
}

/* block_free keeps b in the cache while it has room, else frees it. A
 * cached block is all poisoned under ASan, as when new. */
static void block_free(struct block *b)
{
    ASAN_POISON_MEMORY_REGION(b->data, b->size);
    pthread_mutex_lock(&cache.mu);
    int keep = cache.bytes + b->size <= TM_ARENA_CACHE;
    if (keep) {
        b->next = cache.head;
        cache.head = b;
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
    pthread_mutex_lock(&cache.mu);
    struct block *b = cache.head;
    cache.head = NULL;
    cache.bytes = 0;
    pthread_mutex_unlock(&cache.mu);
    while (b != NULL) {
        struct block *next = b->next;
        ASAN_UNPOISON_MEMORY_REGION(b->data, b->size);
        tm_free(b);
        b = next;
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
    redisReply *r = new_obj(t, t->type);
    char *s = alloc_raw(t->privdata, len + 1); /* all written here */
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
