-- Example Lua task: count the words of a text.
--
-- Body: {"text": "the cat and the hat"}
-- Result: {"words": 5, "distinct": 4, "top": "the"}
--
-- Config:
--   config: { script: /usr/local/share/doc/taskmill/examples/lua/wordcount.lua }

function run(body, ctx)
  if type(body.text) ~= "string" then
    taskmill.reject("field 'text' must be a string")
  end
  local counts, words, distinct = {}, 0, 0
  local top, top_n = nil, 0
  for w in body.text:lower():gmatch("[%w']+") do
    words = words + 1
    local n = (counts[w] or 0) + 1
    if n == 1 then distinct = distinct + 1 end
    counts[w] = n
    if n > top_n then top, top_n = w, n end
    -- long texts: give up cleanly when the deadline has passed
    if words % 10000 == 0 and ctx.should_stop() then
      error("stopped after " .. words .. " words")
    end
  end
  -- taskmill.null: a JSON null (a Lua nil would drop the member)
  return { words = words, distinct = distinct, top = top or taskmill.null }
end
