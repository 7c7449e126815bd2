/* state.c - one worker's lua_State: allocator cap, sandbox, script, run. */
#include "lua_host.h"

#include <lauxlib.h>
#include <lualib.h>

#include <assert.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* LUA_HOOK_COUNT: instructions between two looks at should_stop(). */
#define LUA_HOOK_COUNT 10000
/* LUA_CHECK_MS: the script file is looked at no more often than this. */
#define LUA_CHECK_MS 1000

/* the registry key of the reject marker */
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

/* worker_of: the allocator's user data is the worker (lua_getallocf
 * touches neither the stack nor the heap, so it is safe in a hook and in
 * the panic handler). */
static struct tm_luahost_worker *worker_of(lua_State *L)
{
    void *ud = NULL;
    lua_getallocf(L, &ud);
    return ud;
}

static void hook(lua_State *L, lua_Debug *ar);

/* stop_run marks the run stopped and raises the stop error on L (the
 * running thread). Once stopped, the hook of that thread runs at every
 * instruction and fails each time, so a pcall in the script cannot
 * swallow the stop: the instruction that would call pcall again fails
 * outside it. Other threads' hooks fail at their next count. */
static int stop_run(lua_State *L, struct tm_luahost_worker *w)
{
    w->stopped = 1;
    lua_sethook(L, hook, LUA_MASKCOUNT, 1);
    return luaL_error(L, "stopped: the deadline passed or the run was "
                         "abandoned");
}

/* hook stops a run past its deadline or abandoned. It is set on the main
 * thread before the script loads, so every coroutine (lua_newthread
 * copies the hook of the thread that makes it) has it too. A thread left
 * at count 1 by an earlier stopped run goes back to LUA_HOOK_COUNT. */
static void hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    struct tm_luahost_worker *w = worker_of(L);
    if (w->call == NULL)
        return;
    if (w->stopped || w->call->host->should_stop(w->call)) {
        stop_run(L, w);
        return;
    }
    if (lua_gethookcount(L) != LUA_HOOK_COUNT)
        lua_sethook(L, hook, LUA_MASKCOUNT, LUA_HOOK_COUNT);
}

void tm_luahost_check_stop(lua_State *L)
{
    struct tm_luahost_worker *w = worker_of(L);
    if (w->call != NULL &&
        (w->stopped || w->call->host->should_stop(w->call)))
        stop_run(L, w);
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

/* setmetatable(t, mt): the base library's (upvalue 1), but a metatable
 * with a __gc field is refused. Lua runs finalizers with hooks off (during
 * any collection, after the run, in lua_close), where no deadline can
 * reach them; an object is marked for finalization only when setmetatable
 * finds __gc in its metatable, so refusing here means no script code ever
 * runs as a finalizer. The array metatable is protected (__metatable), so
 * the script cannot add __gc to it either. */
static int l_setmetatable(lua_State *L)
{
    if (lua_type(L, 2) == LUA_TTABLE) {
        lua_pushliteral(L, "__gc");
        if (lua_rawget(L, 2) != LUA_TNIL)
            return luaL_error(L, "setmetatable: a __gc finalizer is not "
                                 "allowed (it would run outside the "
                                 "run's deadline)");
        lua_pop(L, 1);
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
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
    lua_getglobal(L, "setmetatable");
    lua_pushcclosure(L, l_setmetatable, 1);
    lua_setglobal(L, "setmetatable");
    tm_luahost_open_bounded(L);
}


/* is_reject says whether the value at idx is the reject marker, looked up
 * raw (no metamethod of the script's runs). */
static int is_reject(lua_State *L, int idx)
{
    if (lua_type(L, idx) != LUA_TTABLE)
        return 0;
    lua_rawgetp(L, idx, &reject_key);
    int r = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return r;
}

/* msgh keeps a reject marker as it is and turns anything else into text
 * with a traceback, running no script code: a string or number as it is,
 * any other value by its type alone (never __tostring or __name). */
static int msgh(lua_State *L)
{
    if (is_reject(L, 1))
        return 1;
    int t = lua_type(L, 1);
    const char *msg;
    if (t == LUA_TSTRING || t == LUA_TNUMBER)
        msg = lua_tostring(L, 1);
    else
        msg = lua_pushfstring(L, "(error object is a %s value)",
                              lua_typename(L, t));
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* error_text returns the value at idx as a message if it is a string, or
 * a description of its type: never runs script code. */
static const char *error_text(lua_State *L, int idx)
{
    if (lua_type(L, idx) == LUA_TSTRING)
        return lua_tostring(L, idx);
    switch (lua_type(L, idx)) {
    case LUA_TNONE:
        return "(no error object)";
    case LUA_TNUMBER:
        return "(error object is a number value)";
    default:
        return lua_typename(L, lua_type(L, idx));
    }
}

/* on_panic is the state's panic function: an error outside every
 * protected call. It never returns (Lua would abort): it jumps back to the
 * frame that entered the state, which discards the state. */
static int on_panic(lua_State *L)
{
    struct tm_luahost_worker *w = worker_of(L);
    if (w != NULL && w->armed) {
        w->armed = 0;
        longjmp(w->panic_jmp, 1);
    }
    abort(); /* unreachable: every entry into a state is armed */
}

/* enter calls fn(w) with lua_pcall (nres results) with the panic handler
 * armed. Returns the pcall's status, or -1 after a panic (then w->L is
 * no longer usable and the caller discards it). */
static int enter(struct tm_luahost_worker *w, lua_CFunction fn, int nres)
{
    lua_State *L = w->L;
    if (setjmp(w->panic_jmp) != 0)
        return -1;
    w->armed = 1;
    lua_settop(L, 0);
    lua_pushcfunction(L, fn);
    lua_pushlightuserdata(L, w);
    int st = lua_pcall(L, 1, nres, 0);
    w->armed = 0;
    return st;
}

void tm_luahost_close(struct tm_luahost_worker *w)
{
    lua_State *L = w->L;
    if (L == NULL)
        return;
    w->L = NULL;
    w->call = NULL;
    /* No script code runs here: finalizers could not be set (see
     * l_setmetatable); the libraries' own are C and bounded. A panic
     * inside lua_close leaves the state as it is, never touched again. */
    if (setjmp(w->panic_jmp) == 0) {
        w->armed = 1;
        lua_close(L);
    }
    w->armed = 0;
}

/* push_global pushes the global name, read raw (a metatable the script
 * put on _G plays no part). */
static int push_global(lua_State *L, const char *name)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    lua_pushstring(L, name);
    int t = lua_rawget(L, -2);
    lua_remove(L, -2);
    return t;
}

/* setup builds the state and runs the script (a protected call: out of
 * memory anywhere is an error, never a panic). Returns nil, or a message
 * why the script does not load. */
static int setup(lua_State *L)
{
    struct tm_luahost_worker *w = lua_touserdata(L, 1);
    lua_settop(L, 0);
    /* before anything runs, so that every thread the script makes, also
     * at load, inherits the hook */
    lua_sethook(L, hook, LUA_MASKCOUNT, LUA_HOOK_COUNT);
    tm_ljson_setup(L);
    if (w->t->unsafe)
        luaL_openlibs(L);
    else
        open_sandbox(L);
    open_taskmill(L);

    lua_pushcfunction(L, msgh);
    if (luaL_loadfilex(L, w->t->script, "t") != LUA_OK ||
        lua_pcall(L, 0, 0, 1) != LUA_OK) {
        lua_pushfstring(L, "script %s: %s", w->t->script,
                        error_text(L, -1));
        return 1;
    }
    if (push_global(L, w->t->function) != LUA_TFUNCTION) {
        lua_pushfstring(L, "script %s defines no function '%s'",
                        w->t->script, w->t->function);
        return 1;
    }
    lua_pushnil(L);
    return 1;
}

/* log_load_error logs why the load failed: the message at the top of the
 * stack (string or not) or the status. */
static void log_load_error(struct tm_luahost_worker *w, const void *ctx,
                           int kind, int st)
{
    const struct tm_host *h = w->t->host;
    if (st < 0) {
        h->log(ctx, kind, TM_LOG_ERR, "script %s: the Lua state failed "
               "(panic); it is discarded", w->t->script);
        return;
    }
    const char *msg = error_text(w->L, -1);
    if (st == LUA_ERRMEM)
        h->log(ctx, kind, TM_LOG_ERR, "script %s: not enough memory to set "
               "up the state and load the script (memory_limit %zu bytes)",
               w->t->script, w->limit);
    else if (st != LUA_OK)
        h->log(ctx, kind, TM_LOG_ERR, "script %s: %s", w->t->script, msg);
    else
        h->log(ctx, kind, TM_LOG_ERR, "%s", msg);
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
    lua_atpanic(w->L, on_panic);
    if (stat(w->t->script, &st) == 0) {
        w->dev = st.st_dev;
        w->ino = st.st_ino;
        w->mtime = st.st_mtim;
        w->size = st.st_size;
    }
    /* a load during a run is bound by the run's deadline */
    w->call = kind == 1 ? (struct tm_call *)ctx : NULL;
    w->stopped = 0;
    int s = enter(w, setup, 1);
    if (s == LUA_OK && lua_isnil(w->L, -1))
        rc = 0;
    else
        log_load_error(w, ctx, kind, s);
    w->call = NULL;
    if (rc != 0)
        tm_luahost_close(w);
    else
        lua_settop(w->L, 0);
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
    lua_createtable(L, 0, 7);
    lua_pushstring(L, call->id);
    lua_setfield(L, -2, "id");
    /* the run's trace context, nil when it has none */
    const char *tp = tm_traceparent(call);
    if (tp != NULL) {
        lua_pushstring(L, tp);
        lua_setfield(L, -2, "traceparent");
    }
    lua_pushinteger(L, (lua_Integer)call->attempt);
    lua_setfield(L, -2, "attempt");
    lua_pushinteger(L, epoch_deadline(call));
    lua_setfield(L, -2, "deadline_ms");
    lua_pushcfunction(L, l_log);
    lua_setfield(L, -2, "log");
    lua_pushcfunction(L, l_should_stop);
    lua_setfield(L, -2, "should_stop");
}

/* call_fn calls the task's function with the body and ctx; the caller
 * runs it under msgh. */
static int call_fn(lua_State *L)
{
    struct tm_luahost_worker *w = worker_of(L);
    struct tm_call *call = w->call;
    const char *err = NULL;
    lua_settop(L, 0);
    push_global(L, w->t->function);
    if (tm_ljson_decode(L, call->body, call->body_len, &err) != 0)
        return luaL_error(L, "body: %s", err);
    push_ctx(L, call);
    lua_call(L, 2, 1);
    return 1;
}

/* set_error_of sets the run's error from the error value at the top (as
 * msgh left it) and returns the outcome. Reads raw: no script code. */
static int set_error_of(lua_State *L, struct tm_call *call, int st)
{
    if (is_reject(L, -1)) {
        lua_pushliteral(L, "reason");
        lua_rawget(L, -2);
        tm_error(call, lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                      : "rejected");
        return TM_TASK_REJECT;
    }
    if (st == LUA_ERRMEM) {
        tm_error(call, "not enough memory (the state's memory_limit)");
        return TM_TASK_ERROR;
    }
    size_t len = 0;
    const char *msg = error_text(L, -1);
    if (lua_type(L, -1) == LUA_TSTRING)
        lua_tolstring(L, -1, &len);
    else
        len = strlen(msg);
    /* the first line is the reason; the traceback goes to the log */
    const char *nl = memchr(msg, '\n', len);
    size_t first = nl != NULL ? (size_t)(nl - msg) : len;
    char err[256];
    if (first >= sizeof err)
        first = sizeof err - 1;
    memcpy(err, msg, first);
    err[first] = '\0';
    if (nl != NULL)
        tm_log(call, TM_LOG_WARNING, "%s", msg);
    tm_error(call, err);
    return TM_TASK_ERROR;
}

/* run_should_stop: the run's stop check for the result's conversion */
static int run_should_stop(void *ud)
{
    struct tm_luahost_worker *w = ud;
    return w->call->host->should_stop(w->call);
}

/* outcome calls the task's function (under msgh) and reads its error or
 * converts its result; sets w->rc. */
static void outcome(lua_State *L, struct tm_luahost_worker *w)
{
    struct tm_call *call = w->call;
    char err[256];

    lua_settop(L, 0);
    lua_pushcfunction(L, msgh);
    lua_pushcfunction(L, call_fn);
    int st = lua_pcall(L, 0, 1, 1);
    if (st != LUA_OK) {
        w->rc = set_error_of(L, call, st);
        return;
    }
    if (lua_isnil(L, -1)) {
        w->rc = TM_TASK_OK;
        return;
    }
    w->jb = tm_json_new(call->host);
    if (tm_ljson_encode_until(L, -1, w->jb, NULL, err, sizeof err,
                              run_should_stop, w) != 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "invalid result: %s", err);
        tm_error(call, msg);
        return;
    }
    struct tm_json *jb = w->jb;
    w->jb = NULL; /* tm_json_result frees it */
    w->rc = tm_json_result(call, jb) == 0 ? TM_TASK_OK : TM_TASK_ERROR;
}

/* run_steps is the whole run in one protected call: the outcome, then a
 * collection step that gives back what the run left, so the next run
 * starts with room (no script code runs in it: no finalizers). An error
 * raised by the steps after the function (out of memory) is caught by the
 * caller's lua_pcall. */
static int run_steps(lua_State *L)
{
    struct tm_luahost_worker *w = lua_touserdata(L, 1);
    outcome(L, w);
    lua_settop(L, 0);
    lua_gc(L, LUA_GCSTEP, 0);
    return 0;
}

int tm_luahost_run(struct tm_luahost_worker *w, struct tm_call *call)
{
    /* cb_run loads the state first; a worker runs one call at a time */
    assert(w->L != NULL && w->call == NULL);

    w->call = call;
    w->stopped = 0;
    w->rc = TM_TASK_ERROR;
    w->jb = NULL;
    lua_sethook(w->L, hook, LUA_MASKCOUNT, LUA_HOOK_COUNT);
    int st = enter(w, run_steps, 0);
    int rc = w->rc;
    if (w->jb != NULL) {
        tm_json_free(w->jb);
        w->jb = NULL;
    }
    if (st < 0) {
        tm_error(call, "the Lua state failed (panic); it is discarded");
        tm_log(call, TM_LOG_ERR, "the Lua state failed (panic): a new one "
               "is loaded for the next run");
        rc = TM_TASK_ERROR;
        tm_luahost_close(w);
        return rc;
    }
    if (st != LUA_OK) {
        tm_error(call, st == LUA_ERRMEM
                           ? "not enough memory (the state's memory_limit)"
                           : "the Lua host failed to read the run's outcome");
        rc = TM_TASK_ERROR;
    }
    w->call = NULL;
    return rc;
}
