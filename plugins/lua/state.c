/* state.c - one worker's lua_State: allocator cap, sandbox, script, run. */
#include "lua_host.h"

#include <lauxlib.h>
#include <lualib.h>

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* LUA_HOOK_COUNT: instructions between two looks at should_stop(). */
#define LUA_HOOK_COUNT 10000
/* LUA_CHECK_MS: the script file is looked at no more often than this. */
#define LUA_CHECK_MS 1000

/* the registry keys of the worker pointer and the reject marker */
static const char worker_key = 'W';
static const char reject_key = 'R';

/* lalloc is the state's allocator: it refuses to grow past w->limit, so a
 * runaway script gets "not enough memory" instead of the worker's RSS. */
static void *lalloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct tm_luahost_worker *w = ud;
    size_t old = ptr != NULL ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        w->used -= old;
        return NULL;
    }
    if (w->limit > 0 && nsize > old && w->used + (nsize - old) > w->limit)
        return NULL;
    void *p = realloc(ptr, nsize);
    if (p != NULL)
        w->used = w->used - old + nsize;
    return p;
}

static struct tm_luahost_worker *worker_of(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &worker_key);
    struct tm_luahost_worker *w = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return w;
}

/* hook stops a run past its deadline or abandoned. Once stopped it runs
 * at every instruction and fails each time, so a pcall in the script
 * cannot swallow the stop: the instruction that would call pcall again
 * fails outside it. */
static void hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    struct tm_luahost_worker *w = worker_of(L);
    if (w->call == NULL)
        return;
    if (w->stopped || w->call->host->should_stop(w->call)) {
        if (!w->stopped)
            lua_sethook(L, hook, LUA_MASKCOUNT, 1);
        w->stopped = 1;
        luaL_error(L, "stopped: the deadline passed or the run was "
                      "abandoned");
    }
}

/* taskmill.reject(reason): raise the reject marker with the reason. */
static int l_reject(lua_State *L)
{
    const char *why = luaL_optstring(L, 1, "rejected");
    lua_newtable(L);
    lua_pushstring(L, why);
    lua_setfield(L, -2, "reason");
    lua_pushboolean(L, 1);
    lua_rawsetp(L, -2, &reject_key);
    return lua_error(L);
}

/* taskmill.array(t): mark t as an array (so {} is written []). */
static int l_array(lua_State *L)
{
    if (lua_isnoneornil(L, 1))
        lua_newtable(L);
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    tm_ljson_push_array_mt(L);
    lua_setmetatable(L, 1);
    return 1;
}

static int log_level(lua_State *L, int idx)
{
    static const char *const names[] = {"error", "warning", "info", "debug",
                                        NULL};
    static const int levels[] = {TM_LOG_ERR, TM_LOG_WARNING, TM_LOG_INFO,
                                 TM_LOG_DEBUG};
    return levels[luaL_checkoption(L, idx, "info", names)];
}

/* ctx:log(level, text) / ctx.log(level, text) and print(...) */
static int l_log(lua_State *L)
{
    struct tm_luahost_worker *w = worker_of(L);
    int first = lua_istable(L, 1) ? 2 : 1;
    int level = log_level(L, first);
    const char *text = luaL_checkstring(L, first + 1);
    if (w->call != NULL)
        w->call->host->log(w->call, 1, level, "%s", text);
    else
        w->t->host->log(NULL, 0, level, "%s", text);
    return 0;
}

static int l_print(lua_State *L)
{
    struct tm_luahost_worker *w = worker_of(L);
    luaL_Buffer b;
    int n = lua_gettop(L);
    luaL_buffinit(L, &b);
    for (int i = 1; i <= n; i++) {
        if (i > 1)
            luaL_addchar(&b, '\t');
        luaL_tolstring(L, i, NULL);
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    if (w->call != NULL)
        w->call->host->log(w->call, 1, TM_LOG_INFO, "%s",
                           lua_tostring(L, -1));
    return 0;
}

/* ctx.should_stop() */
static int l_should_stop(lua_State *L)
{
    struct tm_luahost_worker *w = worker_of(L);
    lua_pushboolean(L, w->call != NULL &&
                           w->call->host->should_stop(w->call));
    return 1;
}

/* open_sandbox opens what task code needs and nothing that reaches out of
 * the process: no io, no os.execute/exit/remove, no loading files or
 * binary chunks, no debug. */
static void open_sandbox(lua_State *L)
{
    static const char *const drop[] = {"dofile", "loadfile", "load",
                                       "require", NULL};
    static const luaL_Reg libs[] = {{LUA_TABLIBNAME, luaopen_table},
                                    {LUA_STRLIBNAME, luaopen_string},
                                    {LUA_MATHLIBNAME, luaopen_math},
                                    {LUA_UTF8LIBNAME, luaopen_utf8},
                                    {LUA_COLIBNAME, luaopen_coroutine},
                                    {NULL, NULL}};
    static const char *const os_keep[] = {"time", "clock", "date",
                                          "difftime", NULL};
    luaL_requiref(L, LUA_GNAME, luaopen_base, 1);
    lua_pop(L, 1);
    for (const luaL_Reg *l = libs; l->name != NULL; l++) {
        luaL_requiref(L, l->name, l->func, 1);
        lua_pop(L, 1);
    }
    for (int i = 0; drop[i] != NULL; i++) {
        lua_pushnil(L);
        lua_setglobal(L, drop[i]);
    }
    /* os: the clock functions only */
    luaL_requiref(L, LUA_OSLIBNAME, luaopen_os, 0);
    lua_newtable(L);
    for (int i = 0; os_keep[i] != NULL; i++) {
        lua_getfield(L, -2, os_keep[i]);
        lua_setfield(L, -2, os_keep[i]);
    }
    lua_setglobal(L, LUA_OSLIBNAME);
    lua_pop(L, 1);
    /* the string metatable's __index is the string table, which holds
     * nothing unsafe; string.dump only makes bytecode nobody can load */
}

/* open_taskmill makes the global table taskmill. */
static void open_taskmill(lua_State *L)
{
    static const luaL_Reg fns[] = {{"reject", l_reject},
                                   {"array", l_array},
                                   {"log", l_log},
                                   {NULL, NULL}};
    luaL_newlib(L, fns);
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
    lua_setglobal(L, "taskmill");
    lua_pushcfunction(L, l_print);
    lua_setglobal(L, "print");
}

/* msgh keeps a reject marker as it is and turns anything else into its
 * text with a traceback. */
static int msgh(lua_State *L)
{
    if (lua_istable(L, 1)) {
        lua_rawgetp(L, 1, &reject_key);
        int is_reject = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (is_reject)
            return 1;
    }
    const char *msg = luaL_tolstring(L, 1, NULL);
    luaL_traceback(L, L, msg, 1);
    return 1;
}

void tm_luahost_close(struct tm_luahost_worker *w)
{
    if (w->L != NULL)
        lua_close(w->L);
    w->L = NULL;
}

int tm_luahost_load(struct tm_luahost_worker *w, const void *ctx, int kind)
{
    const struct tm_host *h = w->t->host;
    struct stat st;
    int rc = -1;

    tm_luahost_close(w);
    w->used = 0;
    w->limit = w->t->memory_limit;
    w->L = lua_newstate(lalloc, w);
    if (w->L == NULL) {
        h->log(ctx, kind, TM_LOG_ERR, "cannot create a Lua state");
        return -1;
    }
    lua_State *L = w->L;
    lua_pushlightuserdata(L, w);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &worker_key);
    tm_ljson_setup(L);
    if (w->t->unsafe)
        luaL_openlibs(L);
    else
        open_sandbox(L);
    open_taskmill(L);

    if (stat(w->t->script, &st) == 0) {
        w->dev = st.st_dev;
        w->ino = st.st_ino;
        w->mtime = st.st_mtim;
        w->size = st.st_size;
    }
    lua_pushcfunction(L, msgh);
    if (luaL_loadfilex(L, w->t->script, "t") != LUA_OK ||
        lua_pcall(L, 0, 0, -2) != LUA_OK) {
        h->log(ctx, kind, TM_LOG_ERR, "script %s: %s", w->t->script,
               lua_tostring(L, -1));
        goto out;
    }
    lua_getglobal(L, w->t->function);
    if (!lua_isfunction(L, -1)) {
        h->log(ctx, kind, TM_LOG_ERR, "script %s defines no function '%s'",
               w->t->script, w->t->function);
        goto out;
    }
    lua_sethook(L, hook, LUA_MASKCOUNT, LUA_HOOK_COUNT);
    rc = 0;
out:
    lua_settop(L, 0);
    if (rc != 0)
        tm_luahost_close(w);
    return rc;
}

int tm_luahost_changed(struct tm_luahost_worker *w, int64_t now_ms)
{
    struct stat st;
    if (now_ms - w->checked_ms < LUA_CHECK_MS)
        return 0;
    w->checked_ms = now_ms;
    if (stat(w->t->script, &st) != 0)
        return 0; /* gone or being replaced: keep what runs */
    return st.st_dev != w->dev || st.st_ino != w->ino ||
           st.st_size != w->size || st.st_mtim.tv_sec != w->mtime.tv_sec ||
           st.st_mtim.tv_nsec != w->mtime.tv_nsec;
}

/* epoch_deadline converts the call's deadline to Unix time in ms (0 =
 * none), as the other hosts give it. */
static lua_Integer epoch_deadline(const struct tm_call *call)
{
    struct timespec now;
    if (call->deadline_ms <= 0)
        return 0;
    clock_gettime(CLOCK_REALTIME, &now);
    return (lua_Integer)now.tv_sec * 1000 + now.tv_nsec / 1000000 +
           (call->deadline_ms - call->host->now_ms());
}

/* push_ctx pushes the ctx table of the run. */
static void push_ctx(lua_State *L, const struct tm_call *call)
{
    lua_createtable(L, 0, 6);
    lua_pushstring(L, call->id);
    lua_setfield(L, -2, "id");
    lua_pushinteger(L, (lua_Integer)call->attempt);
    lua_setfield(L, -2, "attempt");
    lua_pushinteger(L, epoch_deadline(call));
    lua_setfield(L, -2, "deadline_ms");
    lua_pushcfunction(L, l_log);
    lua_setfield(L, -2, "log");
    lua_pushcfunction(L, l_should_stop);
    lua_setfield(L, -2, "should_stop");
}

/* call_fn runs in protected mode (lua_pcall of it), so that every Lua
 * error, also out of memory while building the arguments, is caught. */
static int call_fn(lua_State *L)
{
    struct tm_luahost_worker *w = worker_of(L);
    struct tm_call *call = w->call;
    const char *err = NULL;
    lua_settop(L, 0);
    lua_pushcfunction(L, msgh);
    lua_getglobal(L, w->t->function);
    if (tm_ljson_decode(L, call->body, call->body_len, &err) != 0)
        return luaL_error(L, "body: %s", err);
    push_ctx(L, call);
    lua_call(L, 2, 1);
    return 1;
}

int tm_luahost_run(struct tm_luahost_worker *w, struct tm_call *call)
{
    lua_State *L = w->L;
    char err[256];
    int rc = TM_TASK_ERROR;

    /* cb_run loads the state first; a worker runs one call at a time */
    assert(L != NULL && w->call == NULL);

    w->call = call;
    w->stopped = 0;
    lua_sethook(L, hook, LUA_MASKCOUNT, LUA_HOOK_COUNT);
    lua_settop(L, 0);
    lua_pushcfunction(L, msgh);
    lua_pushcfunction(L, call_fn);
    int st = lua_pcall(L, 0, 1, 1);
    if (st != LUA_OK) {
        if (lua_istable(L, -1)) {
            lua_getfield(L, -1, "reason");
            tm_error(call, lua_isstring(L, -1) ? lua_tostring(L, -1)
                                               : "rejected");
            rc = TM_TASK_REJECT;
            goto out;
        }
        const char *msg = lua_isstring(L, -1) ? lua_tostring(L, -1)
                                              : "error";
        /* the first line is the reason; the traceback goes to the log */
        const char *nl = strchr(msg, '\n');
        snprintf(err, sizeof err, "%.*s",
                 nl != NULL ? (int)(nl - msg) : (int)strlen(msg), msg);
        if (nl != NULL)
            tm_log(call, TM_LOG_WARNING, "%s", msg);
        tm_error(call, st == LUA_ERRMEM ? "not enough memory (the state's "
                                          "memory_limit)" : err);
        goto out;
    }
    if (lua_isnil(L, -1)) {
        rc = TM_TASK_OK;
        goto out;
    }
    struct tm_json *jb = tm_json_new(call->host);
    if (tm_ljson_encode(L, -1, jb, NULL, err, sizeof err) != 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "invalid result: %s", err);
        tm_json_free(jb);
        tm_error(call, msg);
        goto out;
    }
    rc = tm_json_result(call, jb) == 0 ? TM_TASK_OK : TM_TASK_ERROR;
out:
    lua_settop(L, 0);
    w->call = NULL;
    /* give back what the run left, so the next one starts with room */
    lua_gc(L, LUA_GCSTEP, 0);
    return rc;
}
