-- wrk: every request for one key (an X-Key header), built once in init()
-- so that the client stays cheap.
init = function(args)
    req = wrk.format("GET", wrk.path, { ["X-Key"] = "k" })
end
request = function() return req end
