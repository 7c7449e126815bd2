/* lua_host.h - the Lua host's parts: JSON bridge, per-worker state. */
#ifndef TASKMILL_LUA_HOST_H
#define TASKMILL_LUA_HOST_H

#include <taskmill.h>

#include <lua.h>

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/* TM_LJSON_MAX_DEPTH caps nesting both ways: the daemon's own limit for
 * bodies, so every body it accepts converts. */
#define TM_LJSON_MAX_DEPTH 512

/*
 * The JSON bridge (json_lua.c). Objects are tables; arrays are tables with
 * the array metatable (tm_ljson_array_mt), so that an empty array stays an
 * array; JSON null is the light userdata tm_ljson_null (NULL). Integers
 * that fit in 64 bits are Lua integers, other numbers floats. Strings are
 * bytes: UTF-8 is passed through as it is.
 */

/* tm_ljson_setup stores the array metatable in the registry; call once
 * per state before the others. */
void tm_ljson_setup(lua_State *L);
/* tm_ljson_push_array_mt pushes the array metatable. */
void tm_ljson_push_array_mt(lua_State *L);

/* tm_ljson_decode pushes the value of the JSON text json[0..len). Returns
 * 0, or -1 with a reason (static text) in *err and nothing pushed. */
int tm_ljson_decode(lua_State *L, const char *json, size_t len,
                    const char **err);

/* tm_ljson_encode adds the value at stack index idx to the builder jb
 * (under key, NULL at the top or in an array). Returns 0, or -1 with a
 * reason in err[size] (the builder may have failed on its own). */
int tm_ljson_encode(lua_State *L, int idx, struct tm_json *jb,
                    const char *key, char *err, size_t size);
/* tm_ljson_encode_until is tm_ljson_encode that asks stop(ud) every 4096
 * values and fails ("stopped: ...") once it says yes: the text is capped
 * (16 MiB) but a shared subtable is written once per reference, so the
 * work is bounded by the deadline too. */
int tm_ljson_encode_until(lua_State *L, int idx, struct tm_json *jb,
                          const char *key, char *err, size_t size,
                          int (*stop)(void *ud), void *ud);

/* TM_LUA_MIN_MEMORY: the smallest memory_limit (but 0, none) a task may
 * set: about four times what a state with its libraries, the JSON bridge
 * and a small script takes, so that set-up and a small run fit. */
#define TM_LUA_MIN_MEMORY (256 * 1024)

/* struct tm_luahost_task is a task's settings, read-only after cb_init. */
struct tm_luahost_task {
    char *task;
    char *script;
    char *function;
    size_t memory_limit; /* bytes per state; 0 = none, else at least
                            TM_LUA_MIN_MEMORY */
    int unsafe;          /* 1: every standard library, unsandboxed */
    const struct tm_host *host;
};

/* struct tm_luahost_worker is one worker's state: the lua_State and what its
 * allocator and hook read. Used by one thread at a time. */
struct tm_luahost_worker {
    const struct tm_luahost_task *t;
    lua_State *L;
    size_t used;          /* bytes allocated by L */
    size_t limit;         /* allocation cap; 0 = none */
    struct tm_call *call; /* the run in progress (or the load it makes),
                             for the hook; NULL between runs */
    int stopped;          /* the hook has stopped this run */
    struct tm_json *jb;   /* the result being built, freed by the run */
    int rc;               /* the run's outcome, set inside the run */
    /* The panic handler's way back: every entry into L from C runs with
     * armed set and panic_jmp set by the frame that entered, so a panic
     * (an error outside any protected call) longjmps there and never
     * returns into Lua, which would abort. */
    jmp_buf panic_jmp;
    int armed;
    /* the script file as loaded, to notice a change */
    dev_t dev;
    ino_t ino;
    struct timespec mtime;
    off_t size;
    int64_t checked_ms;   /* when the file was last looked at */
};

/* tm_luahost_load (re)creates w->L and runs the script, all of it in
 * protected calls. Returns 0, or -1 after logging why (ctx/kind as for
 * host->log). With kind 1, ctx is the run that loads it, and the run's
 * deadline binds the script's top-level code too. */
int tm_luahost_load(struct tm_luahost_worker *w, const void *ctx,
                    int kind);
/* tm_luahost_changed says whether the script file differs from the one
 * loaded (looked at no more than once a second). */
int tm_luahost_changed(struct tm_luahost_worker *w, int64_t now_ms);
void tm_luahost_close(struct tm_luahost_worker *w);

/* tm_luahost_run calls the task's function for call and returns a
 * tm_task_result, having set the result or error. Every step (the call,
 * reading its error or converting its result) runs protected; after a
 * panic the state is discarded and the next run loads a new one. */
int tm_luahost_run(struct tm_luahost_worker *w, struct tm_call *call);

/* tm_luahost_check_stop raises the run's stop error (a Lua error) when
 * the run in progress on L should stop; between runs it does nothing.
 * For C functions that loop without running Lua code. */
void tm_luahost_check_stop(lua_State *L);

/* tm_luahost_open_bounded (pattern.c) replaces string.find, match, gmatch,
 * gsub and rep and table.insert, remove and move with versions whose work
 * is bounded by the run's deadline (tm_luahost_check_stop). */
void tm_luahost_open_bounded(lua_State *L);

#endif /* TASKMILL_LUA_HOST_H */
