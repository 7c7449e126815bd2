/* member_private.h - Lua text shared by the scripts that read a delayed
 * message's member of "<queue>.scheduled" (scheduled.c promotes them,
 * delayed.c lists, runs now and deletes them). Not installed. */
#ifndef TASKMILL_REDIS_MEMBER_PRIVATE_H
#define TASKMILL_REDIS_MEMBER_PRIVATE_H

/* TM_REDIS_MEMBER_LUA defines the Lua functions ws, str_end, val_end and
 * body_text(s): the text of the top-level key body of a member already
 * decoded (so well formed), byte for byte as the producer wrote it. */
#define TM_REDIS_MEMBER_LUA \
    "local function ws(s, i)\n"                                              \
    "  return string.find(s, '[^ \\t\\r\\n]', i) or (#s + 1)\n"              \
    "end\n"                                                                  \
    "local function str_end(s, i)\n"                                         \
    "  local j = i + 1\n"                                                    \
    "  while true do\n"                                                      \
    "    local q = string.find(s, '[\"\\\\]', j)\n"                          \
    "    if q == nil then return nil end\n"                                  \
    "    if string.sub(s, q, q) == '\"' then return q + 1 end\n"             \
    "    j = q + 2\n"                                                        \
    "  end\n"                                                                \
    "end\n"                                                                  \
    "local function val_end(s, i)\n"                                         \
    "  local c = string.sub(s, i, i)\n"                                      \
    "  if c == '\"' then return str_end(s, i) end\n"                         \
    "  if c ~= '{' and c ~= '[' then\n"                                      \
    "    return string.find(s, '[,}%] \\t\\r\\n]', i) or (#s + 1)\n"         \
    "  end\n"                                                                \
    "  local depth, j = 0, i\n"                                              \
    "  while true do\n"                                                      \
    "    local k = string.find(s, '[\"{}%[%]]', j)\n"                        \
    "    if k == nil then return nil end\n"                                  \
    "    local d = string.sub(s, k, k)\n"                                    \
    "    if d == '\"' then\n"                                                \
    "      j = str_end(s, k)\n"                                              \
    "      if j == nil then return nil end\n"                                \
    "    else\n"                                                             \
    "      if d == '{' or d == '[' then depth = depth + 1\n"                 \
    "      else depth = depth - 1 end\n"                                     \
    "      j = k + 1\n"                                                      \
    "      if depth == 0 then return j end\n"                                \
    "    end\n"                                                              \
    "  end\n"                                                                \
    "end\n"                                                                  \
    /* the text of the top-level key body of an object already decoded       \
     * (so well formed): the last one, as cjson keeps the last */            \
    "local function body_text(s)\n"                                          \
    "  local i, found = ws(s, 1) + 1, nil\n"                                 \
    "  while true do\n"                                                      \
    "    i = ws(s, i)\n"                                                     \
    "    if string.sub(s, i, i) ~= '\"' then return found end\n"             \
    "    local e = str_end(s, i)\n"                                          \
    "    if e == nil then return found end\n"                                \
    "    local key = string.sub(s, i + 1, e - 2)\n"                          \
    "    i = ws(s, e)\n"                                                     \
    "    if string.sub(s, i, i) ~= ':' then return found end\n"              \
    "    i = ws(s, i + 1)\n"                                                 \
    "    local ve = val_end(s, i)\n"                                         \
    "    if ve == nil then return found end\n"                               \
    "    if key == 'body' then found = string.sub(s, i, ve - 1) end\n"       \
    "    i = ws(s, ve)\n"                                                    \
    "    if string.sub(s, i, i) ~= ',' then return found end\n"              \
    "    i = i + 1\n"                                                        \
    "  end\n"                                                                \
    "end\n"                                                                  \
    ""

#endif /* TASKMILL_REDIS_MEMBER_PRIVATE_H */
