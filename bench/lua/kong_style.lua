-- A Kong-style peer for bench/redis.pl (the rate-limiting plugin's redis
-- policy, in a few lines of Debian's lua module): a fixed window of an hour
-- a key, its counter INCRBY 1 and PEXPIREd to the window's end, the two
-- pipelined in one send on a connection of a cosocket pool; refused above
-- $limit.  Nothing else: no headers, no fallback.
local sock = ngx.socket.tcp()
sock:settimeouts(1000, 1000, 1000)
local ok = sock:connect("127.0.0.1", tonumber(ngx.var.redis_port))
if not ok then return ngx.exit(500) end
local now = ngx.now()
local window = math.floor(now / 3600) * 3600
local key = "kong:" .. (ngx.var.http_x_key or "") .. ":" .. window
local ttl = tostring(math.ceil((window + 3600 - now) * 1000))
sock:send({"*3\r\n$6\r\nINCRBY\r\n$", #key, "\r\n", key, "\r\n$1\r\n1\r\n",
           "*3\r\n$7\r\nPEXPIRE\r\n$", #key, "\r\n", key, "\r\n$", #ttl, "\r\n", ttl, "\r\n"})
local count = sock:receive()
local expiring = sock:receive()
if not count or not expiring then return ngx.exit(500) end
sock:setkeepalive(60000, 64)
if tonumber(string.sub(count, 2)) > tonumber(ngx.var.limit) then return ngx.exit(429) end
