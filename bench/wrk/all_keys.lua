-- wrk: the 1,000,000 keys of random_keys.lua in turn (an X-Key header), to
-- fill a zone with all of them before random_keys.lua is measured.
local n = 1000000
local i = 0
request = function()
    i = i % n + 1
    return wrk.format("GET", wrk.path, { ["X-Key"] = tostring(i) })
end
