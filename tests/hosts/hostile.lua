-- Hostile task code for the Lua host: the body's "mode" picks what it
-- tries. Each mode must end as an outcome, never as a crash or a worker
-- held past the run's deadline.

-- a coroutine made while the script loads (before any run set a hook)
local looper = coroutine.create(function() while true do end end)
local wrapped = coroutine.wrap(function() while true do end end)

local function raising() error("raised by a metamethod") end
local function forever() while true do end end

local modes = {}

-- its own reject caught, reason cleared, a raising __index: re-raised
function modes.reject_meta()
  local _, e = pcall(taskmill.reject, "caught")
  e.reason = nil
  setmetatable(e, { __index = raising, __tostring = raising,
                    __name = "hostile" })
  error(e)
end

-- the reject marker with a reason that is itself a hostile table
function modes.reject_reason_table()
  local _, e = pcall(taskmill.reject, "caught")
  e.reason = setmetatable({}, { __tostring = forever })
  error(e)
end

-- error values of every other kind
function modes.error_table() error(setmetatable({}, { __tostring = forever,
                                                     __index = raising })) end
function modes.error_nil() error(nil) end
function modes.error_number() error(42) end
function modes.error_bool() error(true) end
function modes.error_function() error(print) end
function modes.error_thread() error(coroutine.create(print)) end

-- return values with metatables: read raw
function modes.return_meta()
  return setmetatable({ a = 1 }, { __index = raising, __len = raising,
                                   __pairs = raising, __tostring = raising })
end
-- the shared array metatable is out of reach: no __gc, no __index there
function modes.return_array_meta()
  local a = taskmill.array({ 1, 2 })
  local mt = getmetatable(a)
  if type(mt) == "table" then
    mt.__index = raising
    mt.__gc = forever
  end
  taskmill.array({})
  collectgarbage()
  return a
end
function modes.return_cycle()
  local t = {}
  t.t = t
  return t
end
function modes.return_deep()
  local t = {}
  for _ = 1, 100000 do t = { t } end
  return t
end

-- a shared subtable is written once per reference: 2^40 of them
function modes.return_dag()
  local t = {}
  for _ = 1, 40 do t = { a = t, b = t } end
  return t
end

-- deadline holes
function modes.coroutine_load() coroutine.resume(looper) end
function modes.coroutine_wrap_load() wrapped() end
function modes.gc_run()
  setmetatable({}, { __gc = forever })
  collectgarbage()
end
function modes.gc_after()
  KEEP = setmetatable({}, { __gc = forever })
end
function modes.pattern(body)
  local s = string.rep(body.c or "a", body.n or 100000)
  return { found = s:find(body.p or ".-.-.-.-b") ~= nil }
end
function modes.pattern_plain(body)
  local s = string.rep("a", body.n or 10000000)
  local p = string.rep("a", body.m or 1000000) .. "b"
  return { found = s:find(p, 1, true) ~= nil }
end
function modes.rep_empty() return { n = #string.rep("", 1 << 62) } end
function modes.table_move()
  table.move({}, 1, math.maxinteger - 1, 2, {})
end
function modes.table_insert()
  table.insert(setmetatable({}, { __len = function() return 1 << 62 end }),
               1, "x")
end
function modes.table_remove()
  table.remove(setmetatable({}, { __len = function() return 1 << 62 end }), 1)
end

function modes.ok() return { ok = true } end

function run(body, ctx)
  local f = modes[body.mode]
  if f == nil then taskmill.reject("unknown mode") end
  return f(body, ctx)
end
