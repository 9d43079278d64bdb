-- wrk: a random key among 1,000,000 (or the script's first argument, after
-- "--") per request (an X-Key header), drawn
-- uniformly for each request from a seed of its own (not the same sequence
-- in every run), the requests built once in init() so that the client
-- stays cheap.
local n = 1000000
init = function(args)
    n = tonumber(args[1]) or n
    local f = io.open("/dev/urandom", "rb")
    local b = f:read(4)
    f:close()
    math.randomseed(os.time() + b:byte(1) * 16777216 + b:byte(2) * 65536 + b:byte(3) * 256 + b:byte(4))
    reqs = {}
    for i = 1, n do
        reqs[i] = wrk.format("GET", wrk.path, { ["X-Key"] = tostring(i) })
    end
end
request = function()
    return reqs[math.random(n)]
end
