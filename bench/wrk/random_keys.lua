-- wrk: a random key among 1,000,000 per request (an X-Key header), the
-- requests built once in init() so that the client stays cheap.
local n = 1000000
init = function(args)
    math.randomseed(42)
    reqs = {}
    for i = 1, n do
        reqs[i] = wrk.format("GET", wrk.path, { ["X-Key"] = tostring(math.random(n)) })
    end
    i = 0
end
request = function()
    i = i % n + 1
    return reqs[i]
end
