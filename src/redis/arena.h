/* arena.h - hiredis reply trees built in one arena per read, freed at
 * once: no malloc and no free per reply element. */
#ifndef TASKMILL_REDIS_ARENA_H
#define TASKMILL_REDIS_ARENA_H

#include <hiredis/hiredis.h>

/*
 * struct tm_rarena holds every object of the replies a reader builds in
 * it (see tm_rarena_fns): the reply structs, element vectors and
 * strings, bump-allocated from blocks grown as needed. Nothing in it is
 * freed alone: the whole arena goes when its last reference is dropped.
 * References are counted atomically (the batches of one read may be
 * settled on other threads); allocation is for one thread at a time,
 * the reader's, and only before the first reference is shared.
 *
 * A reply built in an arena must never reach freeReplyObject: free it
 * with tm_rarena_reply_free, which knows both kinds.
 */
struct tm_rarena;

/* tm_rarena_new makes an empty arena with one reference. */
struct tm_rarena *tm_rarena_new(void);
/* tm_rarena_ref takes one more reference to a. */
void tm_rarena_ref(struct tm_rarena *a);
/* tm_rarena_unref drops one reference; the last frees every block.
 * NULL is ignored. */
void tm_rarena_unref(struct tm_rarena *a);
/* tm_rarena_trim frees the blocks the process keeps for its next arenas
 * (a freed arena's blocks are kept, up to 1 MiB, and given to the next
 * ones: no fresh pages per read). For a lane gone idle, and an adapter
 * at its end. */
void tm_rarena_trim(void);
/* tm_rarena_fns are the reader's object functions that build in the
 * arena set as the reader's privdata; their freeObject does nothing. */
extern redisReplyObjectFunctions tm_rarena_fns;
/* tm_rarena_string returns room for a string of len bytes in a, its NUL
 * at s[len] already written: for a string read from the socket straight
 * into its place rather than through the reader's buffer. */
char *tm_rarena_string(struct tm_rarena *a, size_t len);
/* tm_rarena_queue_string queues s (len bytes, from tm_rarena_string):
 * the next bulk string of length 0 that the reader builds in a is s
 * instead. A string read past the reader is thus put in its place in the
 * tree by an empty bulk fed to the reader in its place: a reader fed so
 * must get every genuine empty bulk that way too, queued as a string of
 * length 0, so that the empty bulks and the queue keep in step. */
void tm_rarena_queue_string(struct tm_rarena *a, char *s, size_t len);
/* tm_rarena_queued says whether strings are queued and not yet placed. */
int tm_rarena_queued(const struct tm_rarena *a);
/* tm_rarena_unqueue forgets the queued strings (a reply left half read:
 * their bytes stay in the arena until it goes). */
void tm_rarena_unqueue(struct tm_rarena *a);
/* tm_rarena_reply_free frees r when a is NULL (a malloc'd tree), and
 * leaves it to the arena otherwise. */
void tm_rarena_reply_free(redisReply *r, struct tm_rarena *a);

#endif /* TASKMILL_REDIS_ARENA_H */
