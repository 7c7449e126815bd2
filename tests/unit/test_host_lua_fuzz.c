/* test_host_lua_fuzz.c - a bounded fuzzer for the Lua host's boundary
 * (plugins/lua/state.c, json_lua.c and pattern.c are compiled into this
 * test): random scripts, made from a seed, that raise error values of
 * every type and metatable, return values with metatables, cycles and
 * depth, loop, backtrack in patterns, hide loops in coroutines made at
 * load, try finalizers and C loops; each runs through tm_luahost_load,
 * tm_luahost_run and tm_luahost_close with a short deadline.
 *
 * It asserts that nothing crashes (a Lua panic aborts the test's process)
 * and that no run, load or close ends later than its deadline + 1 s.
 *
 * TM_FUZZ_SECONDS (10 when unset; make check-unit passes 8) bounds the
 * time it runs; TM_FUZZ_SEED repeats a run (the seed is printed, and with
 * it each failing script);
 * TM_FUZZ_ACTION=N generates only actions of kind N (see gen_action). */
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "task/host_json.h"
#include "lua_host.h"
#include "util/util.h"

#include "unit_main.h"

/* FUZZ_SLACK_MS: how far past its deadline a run may end (the contract's
 * deadline + 1 s). */
#define FUZZ_SLACK_MS 1000

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fz_should_stop(const struct tm_call *call)
{
    return call->deadline_ms > 0 && mono_ms() >= call->deadline_ms;
}

/* the outcome of the last run, as the daemon would keep it */
static char last_error[512];
static size_t last_result_len;

static void fz_log(const void *ctx, int kind, int level, const char *fmt,
                   ...)
{
    (void)ctx;
    (void)kind;
    (void)level;
    (void)fmt;
}

static int fz_set_result(struct tm_call *call, const char *json, size_t len)
{
    (void)call;
    (void)json;
    last_result_len = len;
    return 0;
}

static void fz_set_error(struct tm_call *call, const char *msg)
{
    (void)call;
    snprintf(last_error, sizeof last_error, "%s", msg);
}

static int fz_json_result(struct tm_call *call, struct tm_json *jb)
{
    char *text = NULL;
    size_t len = 0;
    const char *why = tm_hjson_take(jb, &text, &len);
    if (why != NULL)
        return -1;
    int rc = fz_set_result(call, text, len);
    tm_free(text);
    return rc;
}

static const struct tm_host host = {
    .struct_size = sizeof(struct tm_host),
    .log = fz_log,
    .set_result = fz_set_result,
    .set_error = fz_set_error,
    .now_ms = mono_ms,
    .should_stop = fz_should_stop,
    TM_HOST_JSON_MEMBERS,
    .json_result = fz_json_result,
};

/* ------------------------------------------------------- the generator */

/* xorshift64*: the whole run follows from the seed */
static uint64_t rng;

static unsigned rnd(unsigned n)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (unsigned)((rng * 2685821657736338717ull) >> 33) % n;
}

struct buf {
    char *p;
    size_t len, cap;
};

static void put(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        ck_assert_int_ge(n, 0);
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = b->cap * 2 + (size_t)n + 64;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
}

/* metamethods a hostile value may carry: each raises, loops, or lies */
static const char *const metas[] = {
    "__index = R", "__index = L", "__newindex = R", "__tostring = R",
    "__tostring = L", "__tostring = function() return {} end",
    "__name = {}", "__name = 42", "__len = R", "__len = L",
    "__len = function() return 1 << 62 end", "__pairs = R",
    "__pairs = L", "__eq = R", "__lt = R", "__concat = R", "__call = R",
    "__close = R", "__metatable = false", "__metatable = {}",
    "__mode = 'k'", "__gc = L", "__gc = true", "__index = {}",
};

static void gen_value(struct buf *b, int depth);

static void gen_meta(struct buf *b)
{
    put(b, "setmetatable(");
    if (rnd(3) == 0)
        put(b, "{}, {");
    else {
        put(b, "{");
        gen_value(b, 2);
        put(b, ", k = ");
        gen_value(b, 2);
        put(b, "}, {");
    }
    for (unsigned i = 0, n = 1 + rnd(4); i < n; i++)
        put(b, "%s, ", metas[rnd(sizeof metas / sizeof metas[0])]);
    put(b, "})");
}

static void gen_value(struct buf *b, int depth)
{
    switch (rnd(depth > 4 ? 12 : 24)) {
    case 0: put(b, "nil"); break;
    case 1: put(b, "true"); break;
    case 2: put(b, "%d", (int)rnd(2000) - 1000); break;
    case 3: put(b, "math.maxinteger"); break;
    case 4: put(b, "(0/0)"); break;
    case 5: put(b, "math.huge"); break;
    case 6: put(b, "'str\\0nul'"); break;
    case 7: put(b, "string.rep('x', %u)", rnd(3) == 0 ? 100000 : rnd(300)); break;
    case 8: put(b, "taskmill.null"); break;
    case 9: put(b, "print"); break;
    case 10: put(b, "coroutine.create(print)"); break;
    case 11: put(b, "body"); break;
    case 12: case 13: case 14: gen_meta(b); break;
    case 15: put(b, "CYC"); break;
    case 16: put(b, "DEEP(%u)", rnd(2) ? 100 + rnd(600) : rnd(20)); break;
    case 17: put(b, "DAG(%u)", rnd(30)); break;
    case 18: put(b, "CAUGHT()"); break;
    case 19:
        put(b, "taskmill.array({");
        gen_value(b, depth + 1);
        put(b, "})");
        break;
    default:
        put(b, "{");
        for (unsigned i = 0, n = rnd(4); i < n; i++) {
            if (rnd(2))
                put(b, "[%u] = ", 1 + rnd(4));
            else if (rnd(4) == 0)
                put(b, "[true] = ");
            else
                put(b, "k%u = ", rnd(5));
            gen_value(b, depth + 1);
            put(b, ", ");
        }
        put(b, "}");
        break;
    }
}

/* only_action: TM_FUZZ_ACTION=N makes every action kind N (0-25), to
 * hammer one kind; -1: any */
static int only_action = -1;

/* the ways a run ends or stalls */
static void gen_action(struct buf *b)
{
    unsigned kind = rnd(26);
    if (only_action >= 0)
        kind = (unsigned)only_action;
    switch (kind) {
    case 0: case 1: case 2:
        put(b, "  error(");
        gen_value(b, 0);
        put(b, rnd(2) ? ", 0)\n" : ")\n");
        break;
    case 3: case 4: case 5:
        put(b, "  do return ");
        gen_value(b, 0);
        put(b, " end\n");
        break;
    case 6:
        put(b, "  taskmill.reject(");
        gen_value(b, 0);
        put(b, ")\n");
        break;
    case 7: {
        /* item 2 of the hostile catalogue: its own reject, reworked */
        put(b, "  do local _, e = pcall(taskmill.reject, 'r')\n"
               "  e.reason = ");
        if (rnd(2))
            put(b, "nil");
        else
            gen_value(b, 1);
        put(b, "\n  setmetatable(e, { __index = R, __tostring = L })\n"
               "  error(e) end\n");
        break;
    }
    case 8: put(b, "  while true do end\n"); break;
    case 9: put(b, "  while true do pcall(L) end\n"); break;
    case 10: put(b, "  coroutine.resume(CO)\n"); break;
    case 11: put(b, "  WRAP()\n"); break;
    case 12:
        put(b, "  string.find(string.rep('a', %u), '%s')\n",
            1000 + rnd(100000),
            rnd(2) ? ".-.-.-.-.-b" : "a-a-a-a-a-a-a-a-a-a-a-a-a-a-b");
        break;
    case 13:
        put(b, "  string.gsub(string.rep('ab', %u), '(a*.-)(b*.-)x', "
               "'%%2')\n", 1000 + rnd(50000));
        break;
    case 14: put(b, "  for _ in string.gmatch(string.rep('a', 50000), "
                    "'.-.-.-b') do end\n"); break;
    case 15: put(b, "  string.find(string.rep('a', 4000000), "
                    "string.rep('a', 400000) .. 'b', 1, true)\n"); break;
    case 16: put(b, "  string.rep('', 1 << 62)\n"); break;
    case 17: put(b, "  table.move({}, 1, math.maxinteger - 1, 2, {})\n"); break;
    case 18: put(b, "  table.insert(setmetatable({}, { __len = function() "
                    "return 1 << 62 end }), 1, 'x')\n"); break;
    case 19: put(b, "  table.remove(setmetatable({}, { __len = function() "
                    "return 1 << 62 end }), 1)\n"); break;
    case 20: put(b, "  pcall(setmetatable, {}, { __gc = L }) "
                    "collectgarbage()\n"); break;
    case 21: put(b, "  local t = {} for i = 1, 1e9 do t[i] = "
                    "string.rep('m', 1000) .. i end\n"); break;
    case 22: put(b, "  pcall(error, setmetatable({}, { __tostring = L }))\n");
        break;
    case 23: put(b, "  local mt = getmetatable(taskmill.array({})) "
                    "if type(mt) == 'table' then mt.__gc = L end "
                    "collectgarbage()\n"); break;
    case 24: put(b, "  return coroutine.wrap(function() while true do "
                    "coroutine.yield() end end)\n"); break;
    default:
        put(b, "  if ctx.should_stop() then return {} end\n");
        break;
    }
}

static void gen_script(struct buf *b)
{
    b->len = 0;
    put(b, "local function R() error('raised by a metamethod') end\n"
           "local function L() while true do end end\n"
           "CYC = {} CYC.self = CYC\n"
           "function DEEP(n) local t = {} for _ = 1, n do t = { t } end "
           "return t end\n"
           "function DAG(n) local t = {} for _ = 1, n do t = { a = t, "
           "b = t } end return t end\n"
           "function CAUGHT() local _, e = pcall(taskmill.reject, 'c') "
           "return e end\n"
           "CO = coroutine.create(function() while true do end end)\n"
           "WRAP = coroutine.wrap(function() while true do end end)\n");
    if (rnd(8) == 0)
        put(b, "setmetatable(_G, { __index = R })\n");
    if (rnd(10) == 0)
        put(b, "local x = string.rep('a', 30):find('a-a-a-a-b')\n");
    put(b, "function run(body, ctx)\n");
    for (unsigned i = 0, n = 1 + rnd(3); i < n; i++)
        gen_action(b);
    put(b, "end\n");
}

static const char *const bodies[] = {
    "{}", "{\"a\":[1,2,{\"b\":null}]}", "{\"s\":\"aaaaaaaaaaaaaaaaaaaaaaaa\"}",
    "{\"x\":1e300,\"y\":-0.5,\"z\":[[],{}]}",
};

/* -------------------------------------------------------------- the run */

/* The watchdog: a run (or close) that has not returned by its deadline +
 * FUZZ_SLACK_MS never will, so the check after it would never fail; the
 * timer prints the script and aborts the test's process instead. */
static const struct buf *current;
static unsigned long long current_seed;

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "host_lua_fuzz: a run is still going past "
                              "its deadline + 1 s; the script:\n";
    char seed[64];
    int n = snprintf(seed, sizeof seed, "seed %llu: ", current_seed);
    (void)!write(2, seed, (size_t)n);
    (void)!write(2, msg, sizeof msg - 1);
    if (current != NULL)
        (void)!write(2, current->p, current->len);
    abort();
}

/* arm sets the watchdog to fire ms milliseconds from now (0: off). */
static void arm(int64_t ms)
{
    struct itimerval it = {{0, 0}, {ms / 1000, (ms % 1000) * 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
}

START_TEST(fuzz_host_boundary)
{
    const char *secs_env = getenv("TM_FUZZ_SECONDS");
    const char *seed_env = getenv("TM_FUZZ_SEED");
    long secs = secs_env != NULL ? strtol(secs_env, NULL, 10) : 10;
    uint64_t seed = seed_env != NULL ? strtoull(seed_env, NULL, 10)
                                     : (uint64_t)time(NULL) ^
                                           (uint64_t)getpid() << 20;
    if (secs <= 0)
        secs = 10;
    if (getenv("TM_FUZZ_ACTION") != NULL)
        only_action = atoi(getenv("TM_FUZZ_ACTION")) % 26;
    rng = seed != 0 ? seed : 1;
    printf("host_lua_fuzz: seed %llu (TM_FUZZ_SEED), %ld s\n",
           (unsigned long long)seed, secs);
    fflush(stdout);

    char dir[] = "/tmp/tm-lua-fuzz.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/fuzz.lua", dir);

    static const size_t limits[] = {0, TM_LUA_MIN_MEMORY, 1u << 20,
                                    64u << 20};
    struct buf b = {0};
    current = &b;
    current_seed = (unsigned long long)seed;
    signal(SIGALRM, on_alarm);
    int64_t end = mono_ms() + secs * 1000;
    unsigned scripts = 0, runs = 0;
    while (mono_ms() < end) {
        gen_script(&b);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fwrite(b.p, 1, b.len, f);
        fclose(f);

        static char task_name[] = "fuzz", function[] = "run";
        struct tm_luahost_task t = {
            .task = task_name, .script = path, .function = function,
            .memory_limit = limits[rnd(4)], .unsafe = rnd(6) == 0,
            .host = &host};
        struct tm_luahost_worker w = {.t = &t};
        struct tm_call call = {.struct_size = sizeof call, .id = "fuzz-1",
                               .attempt = 1, .host = &host};
        struct tm_task_env env = {.struct_size = sizeof env, .task = "fuzz",
                                  .config_json = "{}", .host = &host};
        scripts++;
        /* the load as cb_init makes it (no run, no deadline: the scripts
         * loop at load only in coroutines), then runs with deadlines */
        if (tm_luahost_load(&w, &env, 0) != 0)
            continue;
        for (unsigned i = 0, n = 1 + rnd(3); i < n; i++) {
            const char *body = bodies[rnd(4)];
            call.body = body;
            call.body_len = strlen(body);
            call.deadline_ms = mono_ms() + 50 + rnd(200);
            call.worker_data = &w;
            last_error[0] = '\0';
            if (w.L == NULL && tm_luahost_load(&w, &call, 1) != 0)
                break;
            arm(call.deadline_ms - mono_ms() + FUZZ_SLACK_MS + 1);
            tm_luahost_run(&w, &call);
            arm(0);
            runs++;
            int64_t late = mono_ms() - call.deadline_ms;
            if (late > FUZZ_SLACK_MS)
                ck_abort_msg("seed %llu: a run ended %lld ms past its "
                             "deadline (last error: %s); script:\n%s",
                             (unsigned long long)seed, (long long)late,
                             last_error, b.p);
        }
        int64_t t0 = mono_ms();
        arm(FUZZ_SLACK_MS + 1);
        tm_luahost_close(&w);
        arm(0);
        if (mono_ms() - t0 > FUZZ_SLACK_MS)
            ck_abort_msg("seed %llu: closing the state took %lld ms; "
                         "script:\n%s", (unsigned long long)seed,
                         (long long)(mono_ms() - t0), b.p);
    }
    current = NULL;
    printf("host_lua_fuzz: %u scripts, %u runs, no crash, none late\n",
           scripts, runs);
    unlink(path);
    rmdir(dir);
    free(b.p);
}
END_TEST

static Suite *lua_fuzz_suite(void)
{
    Suite *s = suite_create("host_lua_fuzz");
    TCase *tc = tcase_create("core");
    const char *secs = getenv("TM_FUZZ_SECONDS");
    /* the run's own length plus room to finish the last script */
    tcase_set_timeout(tc, (double)(secs != NULL && atoi(secs) > 0
                                       ? atoi(secs) : 10) + 60);
    tcase_add_test(tc, fuzz_host_boundary);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(lua_fuzz_suite)
