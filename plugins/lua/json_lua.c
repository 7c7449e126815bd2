/* json_lua.c - JSON text to Lua values and Lua values to JSON. */
#include "lua_host.h"

#include <lauxlib.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the registry key of the array metatable (its address is unique) */
static const char array_mt_key = 'A';

/* The array metatable is protected: getmetatable() of an array gives the
 * string "array" and setmetatable() on one fails, so task code can neither
 * change the shared table (a __gc there would make every array a
 * finalizer) nor unmark an array. The bridge reads it raw. */
void tm_ljson_setup(lua_State *L)
{
    lua_createtable(L, 0, 2);
    lua_pushliteral(L, "array");
    lua_setfield(L, -2, "__name");
    lua_pushliteral(L, "array");
    lua_setfield(L, -2, "__metatable");
    lua_rawsetp(L, LUA_REGISTRYINDEX, &array_mt_key);
}

void tm_ljson_push_array_mt(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &array_mt_key);
}

/* ------------------------------------------------------------- decoding */

struct dec {
    lua_State *L;
    const char *p, *end;
    const char *err;
};

static void skip_ws(struct dec *d)
{
    while (d->p < d->end && (*d->p == ' ' || *d->p == '\t' ||
                             *d->p == '\n' || *d->p == '\r'))
        d->p++;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* put_utf8 appends code point cp to b as UTF-8. */
static void put_utf8(luaL_Buffer *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    luaL_addlstring(b, u, n);
}

/* dec_string pushes the string at d->p (at its opening quote). */
static int dec_string(struct dec *d)
{
    luaL_Buffer b;
    d->p++;
    luaL_buffinit(d->L, &b);
    for (;;) {
        const char *s = d->p;
        while (d->p < d->end && *d->p != '"' && *d->p != '\\' &&
               (unsigned char)*d->p >= 0x20)
            d->p++;
        luaL_addlstring(&b, s, (size_t)(d->p - s));
        if (d->p >= d->end || (unsigned char)*d->p < 0x20)
            goto bad;
        if (*d->p == '"') {
            d->p++;
            luaL_pushresult(&b);
            return 0;
        }
        /* an escape */
        if (d->end - d->p < 2)
            goto bad;
        char c = d->p[1];
        d->p += 2;
        switch (c) {
        case '"': luaL_addchar(&b, '"'); break;
        case '\\': luaL_addchar(&b, '\\'); break;
        case '/': luaL_addchar(&b, '/'); break;
        case 'b': luaL_addchar(&b, '\b'); break;
        case 'f': luaL_addchar(&b, '\f'); break;
        case 'n': luaL_addchar(&b, '\n'); break;
        case 'r': luaL_addchar(&b, '\r'); break;
        case 't': luaL_addchar(&b, '\t'); break;
        case 'u': {
            unsigned cp, lo;
            if (d->end - d->p < 4 || hex4(d->p, &cp) != 0)
                goto bad;
            d->p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (d->end - d->p < 6 || d->p[0] != '\\' || d->p[1] != 'u' ||
                    hex4(d->p + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
                    goto bad;
                d->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                goto bad;
            }
            put_utf8(&b, cp);
            break;
        }
        default:
            goto bad;
        }
    }
bad:
    luaL_pushresult(&b);
    lua_pop(d->L, 1);
    d->err = "bad string";
    return -1;
}

/* dec_number pushes the number at d->p: an integer when it has no
 * fraction or exponent and fits, else a float. */
static int dec_number(struct dec *d)
{
    const char *s = d->p;
    int is_int = 1;
    if (d->p < d->end && *d->p == '-')
        d->p++;
    if (d->p >= d->end || *d->p < '0' || *d->p > '9')
        goto bad;
    while (d->p < d->end &&
           ((*d->p >= '0' && *d->p <= '9') || *d->p == '.' || *d->p == 'e' ||
            *d->p == 'E' || *d->p == '+' || *d->p == '-')) {
        if (*d->p == '.' || *d->p == 'e' || *d->p == 'E')
            is_int = 0;
        d->p++;
    }
    char buf[64];
    size_t n = (size_t)(d->p - s);
    char *tmp = n < sizeof buf ? buf : malloc(n + 1);
    if (tmp == NULL) {
        d->err = "out of memory";
        return -1;
    }
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    char *stop;
    int rc = 0;
    errno = 0;
    long long ll = is_int ? strtoll(tmp, &stop, 10) : 0;
    if (is_int && errno == 0 && *stop == '\0') {
        lua_pushinteger(d->L, (lua_Integer)ll);
    } else {
        errno = 0;
        double v = strtod(tmp, &stop);
        if (*stop != '\0' || !isfinite(v)) {
            d->err = "bad number";
            rc = -1;
        } else {
            lua_pushnumber(d->L, v);
        }
    }
    if (tmp != buf)
        free(tmp);
    return rc;
bad:
    d->err = "bad number";
    return -1;
}

static int dec_value(struct dec *d, int depth);

/* dec_container pushes the object or array at d->p. */
static int dec_container(struct dec *d, int depth)
{
    int array = *d->p == '[';
    char close = array ? ']' : '}';
    lua_Integer i = 0;

    if (depth >= TM_LJSON_MAX_DEPTH) {
        d->err = "nested too deep";
        return -1;
    }
    if (!lua_checkstack(d->L, 4)) {
        d->err = "out of memory";
        return -1;
    }
    d->p++;
    lua_newtable(d->L);
    if (array) {
        tm_ljson_push_array_mt(d->L);
        lua_setmetatable(d->L, -2);
    }
    skip_ws(d);
    if (d->p < d->end && *d->p == close) {
        d->p++;
        return 0;
    }
    for (;;) {
        skip_ws(d);
        if (!array) {
            if (d->p >= d->end || *d->p != '"' || dec_string(d) != 0)
                goto bad;
            skip_ws(d);
            if (d->p >= d->end || *d->p != ':')
                goto bad;
            d->p++;
        }
        if (dec_value(d, depth + 1) != 0) {
            if (!array)
                lua_pop(d->L, 1);
            goto fail;
        }
        if (array)
            lua_rawseti(d->L, -2, ++i);
        else
            lua_rawset(d->L, -3);
        skip_ws(d);
        if (d->p < d->end && *d->p == ',') {
            d->p++;
            continue;
        }
        if (d->p < d->end && *d->p == close) {
            d->p++;
            return 0;
        }
        goto bad;
    }
bad:
    if (d->err == NULL)
        d->err = array ? "bad array" : "bad object";
fail:
    lua_pop(d->L, 1);
    return -1;
}

static int dec_literal(struct dec *d, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(d->end - d->p) < n || memcmp(d->p, word, n) != 0) {
        d->err = "bad literal";
        return -1;
    }
    d->p += n;
    return 0;
}

static int dec_value(struct dec *d, int depth)
{
    skip_ws(d);
    if (d->p >= d->end) {
        d->err = "unexpected end";
        return -1;
    }
    switch (*d->p) {
    case '{':
    case '[':
        return dec_container(d, depth);
    case '"':
        return dec_string(d);
    case 't':
        if (dec_literal(d, "true") != 0)
            return -1;
        lua_pushboolean(d->L, 1);
        return 0;
    case 'f':
        if (dec_literal(d, "false") != 0)
            return -1;
        lua_pushboolean(d->L, 0);
        return 0;
    case 'n':
        if (dec_literal(d, "null") != 0)
            return -1;
        lua_pushlightuserdata(d->L, NULL);
        return 0;
    default:
        return dec_number(d);
    }
}

int tm_ljson_decode(lua_State *L, const char *json, size_t len,
                    const char **err)
{
    struct dec d = {.L = L, .p = json, .end = json + len};
    if (dec_value(&d, 0) != 0) {
        *err = d.err != NULL ? d.err : "bad JSON";
        return -1;
    }
    skip_ws(&d);
    if (d.p != d.end) {
        lua_pop(L, 1);
        *err = "text after the value";
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------- encoding */

/* is_array says whether the table at idx is written as an array: it has
 * the array metatable, or it is a non-empty sequence 1..n with no other
 * keys. An empty plain table is an object. */
static int is_array(lua_State *L, int idx)
{
    int arr = 0;
    if (lua_getmetatable(L, idx)) {
        tm_ljson_push_array_mt(L);
        arr = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
        if (arr)
            return 1;
    }
    lua_Unsigned n = lua_rawlen(L, idx);
    if (n == 0)
        return 0;
    lua_Unsigned count = 0;
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TNUMBER || !lua_isinteger(L, -1)) {
            lua_pop(L, 1);
            return 0;
        }
        lua_Integer k = lua_tointeger(L, -1);
        if (k < 1 || (lua_Unsigned)k > n) {
            lua_pop(L, 1);
            return 0;
        }
        count++;
    }
    return count == n;
}

/* struct enc_stop: the caller's stop check, asked every ENC_STOP_EVERY
 * values (NULL: never). */
struct enc_stop {
    int (*stop)(void *ud);
    void *ud;
    unsigned n;
};
#define ENC_STOP_EVERY 4096

static int enc_value(lua_State *L, int idx, struct tm_json *jb,
                     const char *key, int depth, char *err, size_t size,
                     struct enc_stop *es);

static int enc_table(lua_State *L, int idx, struct tm_json *jb,
                     const char *key, int depth, char *err, size_t size,
                     struct enc_stop *es)
{
    if (depth >= TM_LJSON_MAX_DEPTH) {
        snprintf(err, size, "nested too deep (or a table contains itself)");
        return -1;
    }
    if (!lua_checkstack(L, 6)) {
        snprintf(err, size, "out of memory");
        return -1;
    }
    if (is_array(L, idx)) {
        lua_Unsigned n = lua_rawlen(L, idx);
        tm_json_begin_array(jb, key);
        for (lua_Unsigned i = 1; i <= n; i++) {
            lua_rawgeti(L, idx, (lua_Integer)i);
            int rc = enc_value(L, lua_gettop(L), jb, NULL, depth + 1, err,
                               size, es);
            lua_pop(L, 1);
            if (rc != 0)
                return -1;
        }
        return tm_json_end(jb);
    }
    tm_json_begin_object(jb, key);
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        if (lua_type(L, -2) != LUA_TSTRING) {
            snprintf(err, size, "an object key is a %s, not a string",
                     luaL_typename(L, -2));
            lua_pop(L, 2);
            return -1;
        }
        /* the key stays on the stack, so the pointer stays valid */
        const char *k = lua_tostring(L, -2);
        if (strlen(k) != lua_rawlen(L, -2)) {
            snprintf(err, size, "an object key holds a NUL byte");
            lua_pop(L, 2);
            return -1;
        }
        int rc = enc_value(L, lua_gettop(L), jb, k, depth + 1, err, size,
                           es);
        lua_pop(L, 1);
        if (rc != 0) {
            lua_pop(L, 1);
            return -1;
        }
    }
    return tm_json_end(jb);
}

static int enc_value(lua_State *L, int idx, struct tm_json *jb,
                     const char *key, int depth, char *err, size_t size,
                     struct enc_stop *es)
{
    size_t len;
    const char *s;

    if (es->stop != NULL && ++es->n % ENC_STOP_EVERY == 0 &&
        es->stop(es->ud)) {
        snprintf(err, size, "stopped: the deadline passed");
        return -1;
    }

    switch (lua_type(L, idx)) {
    case LUA_TNIL:
        return tm_json_add_null(jb, key);
    case LUA_TBOOLEAN:
        return tm_json_add_bool(jb, key, lua_toboolean(L, idx));
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx))
            return tm_json_add_int(jb, key, (int64_t)lua_tointeger(L, idx));
        if (!isfinite(lua_tonumber(L, idx))) {
            snprintf(err, size, "a number is not finite");
            return -1;
        }
        return tm_json_add_double(jb, key, (double)lua_tonumber(L, idx));
    case LUA_TSTRING:
        s = lua_tolstring(L, idx, &len);
        return tm_json_add_stringn(jb, key, s, len);
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == NULL)
            return tm_json_add_null(jb, key);
        break;
    case LUA_TTABLE:
        return enc_table(L, idx, jb, key, depth, err, size, es);
    default:
        break;
    }
    snprintf(err, size, "a %s cannot be written as JSON",
             luaL_typename(L, idx));
    return -1;
}

int tm_ljson_encode(lua_State *L, int idx, struct tm_json *jb,
                    const char *key, char *err, size_t size)
{
    return tm_ljson_encode_until(L, idx, jb, key, err, size, NULL, NULL);
}

int tm_ljson_encode_until(lua_State *L, int idx, struct tm_json *jb,
                          const char *key, char *err, size_t size,
                          int (*stop)(void *ud), void *ud)
{
    struct enc_stop es = {.stop = stop, .ud = ud};
    err[0] = '\0';
    int rc = enc_value(L, lua_absindex(L, idx), jb, key, 0, err, size, &es);
    if (rc != 0 && err[0] == '\0') {
        const char *why = tm_json_error(jb);
        snprintf(err, size, "%s", why != NULL ? why : "cannot build JSON");
    }
    return rc;
}
