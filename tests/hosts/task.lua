-- Test task for the Lua host: the body's "mode" picks the behaviour.
local loaded = os.time()

local modes = {}

function modes.ok(body, ctx)
  return { ok = true, id = ctx.id, attempt = ctx.attempt,
           has_deadline = ctx.deadline_ms > 0, stop = ctx.should_stop() }
end

-- the body back as it came: the JSON round trip
function modes.echo(body) return body.value end

function modes.error() error("something broke") end

function modes.reject() taskmill.reject("bad input") end

-- a function is not JSON
function modes.invalid() return { f = print } end

function modes.loop()
  local n = 0
  while true do n = n + 1 end
end

-- a loop that catches the stop: still stopped
function modes.catching()
  while true do pcall(function() while true do end end) end
end

function modes.memory()
  local t = {}
  for i = 1, 1e9 do t[i] = string.rep("x", 1024) .. i end
end

function modes.sandbox()
  return { io = io ~= nil, execute = os.execute ~= nil,
           load = load ~= nil, require = require ~= nil,
           time = type(os.time()), utf8 = utf8.char(228) }
end

function modes.log(body, ctx)
  ctx.log("warning", "hello from lua")
  return nil
end

function modes.version() return { version = VERSION } end

VERSION = 1

function run(body, ctx)
  local f = modes[body.mode]
  if f == nil then taskmill.reject("unknown mode") end
  return f(body, ctx)
end
