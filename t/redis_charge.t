#!/usr/bin/perl
# charge= and ban= on Redis zones, through two nginx servers sharing one
# Redis: the tokens an upstream reports spent in Redis when each request
# ends, into debt, with requests spread over both servers (exact in sum);
# failed logins only, then a ban, lifted by the key API; a charge that
# cannot be delivered (Redis gone while the request ran) counted and logged
# once, folded; a request decided by on_redis_error charged locally
# (local) or not at all (allow).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use HTTP::Tiny;
use IO::Select;
use IO::Socket::INET;
use JSON::PP qw(decode_json);
use Time::HiRes qw(time sleep);
use RLTest;
use RLRedis;

my $redis = RLRedis->new->start;
my $rport = $redis->port;
my $gone = RLRedis->new->start;   # stopped while requests run
my $gport = $gone->port;

my @fleet = map { RLTest->new() } 1 .. 2;
for my $t (@fleet) {
    my $p = $t->prefix;
    RLTest::write_file("$p/htpasswd", "alice:{PLAIN}right\n");
    RLTest::write_file("$p/html/big", 'x' x 300_000);
    $t->write_conf(<<"EOF", workers => 2);
ratelimit_zone ai 1m redis=127.0.0.1:$rport redis_timeout=5s;
ratelimit_zone login 1m redis=127.0.0.1:$rport redis_timeout=5s redis_prefix=login:;
ratelimit_zone gone 1m redis=127.0.0.1:$gport redis_timeout=500ms;
ratelimit_zone open 1m redis=127.0.0.1:$gport redis_timeout=500ms on_redis_error=allow;
map \$status \$login_failed { 401 1; 403 1; default 0; }
log_format charged '\$uri \$status \$ratelimit_charged \$ratelimit_decided_by';

server {
    listen unix:%%PREFIX%%/up.sock;
    location /tokens { add_header X-Tokens-Used \$arg_t always; return 200 "ok\\n"; }
}

server {
    listen 127.0.0.1:%%PORT%%;
    access_log %%PREFIX%%/charged.log charged;

    location /ai {
        ratelimit zone=ai key=\$http_x_api_key limit=1000 period=1000s
                  charge=\$upstream_http_x_tokens_used name=tokens;
        proxy_pass http://unix:%%PREFIX%%/up.sock:/tokens;
    }
    location /bulk {
        ratelimit zone=ai key=\$http_x_key algorithm=fixed_window align=first limit=1000000 period=1h
                  cost=7 charge=\$upstream_http_x_tokens_used name=bulk;
        proxy_pass http://unix:%%PREFIX%%/up.sock:/tokens;
    }
    location /login {
        ratelimit zone=login key=\$http_x_client algorithm=sliding_log limit=5 period=1s
                  charge=\$login_failed ban=6s name=login;
        auth_basic "login";
        auth_basic_user_file %%PREFIX%%/htpasswd;
        alias %%PREFIX%%/html/index.html;
    }
    location = /slow {
        ratelimit zone=gone key=\$http_x_client limit=100 period=1h charge=7 name=slow;
        alias %%PREFIX%%/html/big;
        limit_rate 100k;
    }
    location = /fast {
        ratelimit zone=gone key=\$http_x_client limit=100 period=1h charge=7 name=slow;
        alias %%PREFIX%%/html/index.html;
    }
    location = /open {
        ratelimit zone=open key=\$http_x_client limit=100 period=1h charge=7 name=open;
        alias %%PREFIX%%/html/index.html;
    }
    location /rl/ { ratelimit_api write=on; }
    location = /stats { ratelimit_stats; }
}
EOF
    $t->start();
}

my $http = HTTP::Tiny->new(keep_alive => 0, timeout => 10, max_redirect => 0);
my $turn = 0;
# a request to the next server in turn
sub req {
    my ($path, %h) = @_;
    my $t = $fleet[ $turn++ % @fleet ];
    my $method = delete $h{method} // 'GET';
    return $http->request($method, 'http://127.0.0.1:' . $t->port . $path, { headers => \%h });
}
sub login {
    my ($client, $pw) = @_;
    return req('/login', 'X-Client' => $client, Authorization => RLTest::basic_auth("alice:$pw"));
}
my $n;   # the login zone's charges settled so far
# five failed logins of a client, each settled, within the log's second:
# a machine too busy to send and settle them in a second leaves an earlier
# one out of the window, so the five are sent again once it is empty
sub failures {
    my ($client) = @_;
    for my $try (1 .. 5) {
        my $t0 = time;
        for my $i (1 .. 5) {
            is(login($client, 'wrong')->{status}, 401, "$client: failure $i: 401");
            settled('login', ++$n);
        }
        return if time - $t0 < 0.9;
        diag(sprintf('five failures took %.2f s: again', time - $t0));
        sleep 1.1;
    }
}
sub stats { $_[0]->zone_stats($_[1]) }
# a figure summed over the fleet: a rule's counter, or the zone's Redis one
sub fleet_sum {
    my ($zone, $rule, $what) = @_;
    my $sum = 0;
    for my $t (@fleet) {
        my $z = stats($t, $zone);
        $sum += ($rule ? $z->{rules}{$rule}{$what} : $z->{redis}{$what}) // 0;
    }
    return $sum;
}
# the charges the fleet sent are settled in Redis: its replies counted
sub settled {
    my ($zone, $n) = @_;
    return RLTest::wait_until(sub { fleet_sum($zone, undef, 'charges') >= $n }, 10)
        && fleet_sum($zone, undef, 'charges') == $n;
}

# ---- tokens an upstream reports, over two servers ----

my $r;
for my $i (1 .. 3) {
    $r = req('/ai?t=400', 'X-Api-Key' => 'k1');
    is($r->{status}, 200, "tokens: request $i served (server " . (($turn - 1) % 2 + 1) . ')');
    ok(settled('ai', $i), "tokens: its 400 settled in Redis");
}
$r = req('/ai?t=400', 'X-Api-Key' => 'k1');
is($r->{status}, 429, 'tokens: the fourth refused (1,200 of 1,000 spent over two servers: 200 in debt)');
my $ra = $r->{headers}{'retry-after'};
ok($ra >= 200 && $ra <= 201, "Retry-After matches the debt and the request's own unit: $ra s (201 at a unit a second)");
is(req('/ai?t=400', 'X-Api-Key' => 'k2')->{status}, 200, 'another key is served');
ok(settled('ai', 4), 'its charge settled too');
is(fleet_sum('ai', 'tokens', 'charged'), 1600, 'stats: 1,600 units charged, counted by the servers that sent them');
is(fleet_sum('ai', 'tokens', 'debts'), 1, 'stats: one request ended in debt');
my $k = decode_json(req('/rl/zones/ai/keys?key=k1&rule=tokens')->{content})->{rules}[0];
is($k->{remaining}, 0, 'the key API reads the debt in Redis: nothing left');
ok($k->{retry_after} >= 200 && $k->{retry_after} <= 201, "and when the key may spend again ($k->{retry_after} s)");
# a request's log line is written after its response went out
my $log;
RLTest::wait_until(sub {
    $log = join '', map { RLTest::read_file($_->prefix . '/charged.log') } @fleet;
    $log =~ m{^/ai 200 400 redis$}m && $log =~ m{^/ai 429 - redis$}m;
}, 10);
like($log, qr{^/ai 200 400 redis$}m, '$ratelimit_charged: the units sent to Redis');
like($log, qr{^/ai 429 - redis$}m, 'a refused request is charged nothing');

# a charge past the debt's bound: capped in Redis, and logged when its reply
# says so
is(req('/ai?t=5000', 'X-Api-Key' => 'k3')->{status}, 200, 'a request charged 5,000 of a 1,000 budget');
ok(settled('ai', 5), 'settled');
is(fleet_sum('ai', 'tokens', 'charged'), 1600 + 2000, 'capped at a limit beyond the budget: 2,000 charged');
ok(RLTest::wait_until(sub { (join '', map { $_->error_log } @fleet)
                                =~ /\[warn\] .*ratelimit: rule "tokens" in zone "ai": charge 5000 capped at 2000: a key owes at most one limit beyond its budget/ }, 5),
   'the cap logged at warn');

# ---- exact in sum: 200 requests at once over both servers ----
# (cost=7: the worst case declared, each reserves 7, and a key runs as many
# at once as its budget covers; without it, three at a time)

my ($ok, $limited, $other) = RLTest::burst(ports => [ map { $_->port } @fleet ], path => '/bulk?t=7', key => 'sum',
                                           total => 200, conns => 16);
is($ok, 200, '200 requests at once over two servers: all served');
ok(settled('ai', 5 + 200), 'every charge settled in Redis');
$k = decode_json(req('/rl/zones/ai/keys?key=sum&rule=bulk')->{content})->{rules}[0];
is($k->{remaining}, 1000000 - 200 * 7, 'Redis holds exactly 1,400 units spent: each reservation given back, each charge spent');
is(fleet_sum('ai', 'bulk', 'charged'), 1400, 'the servers counted 1,400 charged between them');

# ---- failed logins only, then a ban ----

$n = fleet_sum('login', undef, 'charges');
for my $i (1 .. 20) {
    $r = login('c1', 'right');
    last unless $r->{status} == 200 && settled('login', ++$n);
}
is($r->{status}, 200, '20 successful logins in a row over two servers: all served');
is($n, fleet_sum('login', undef, 'charges'), 'each settled (charged 0: its reserved unit given back)');
failures('c1');
my $banned_at = RLTest::check_ban(sub { login('c1', 'right') }, ' (on the other server)');
my $api = decode_json(req('/rl/zones/login/keys?key=c1&rule=login')->{content});
ok($api->{rules}[0]{banned_ms} > 0 && $api->{rules}[0]{banned_ms} <= 6000,
   "the key API says until when it is banned ($api->{rules}[0]{banned_ms} ms)") or diag(explain($api));
is($api->{rules}[0]{refused}, JSON::PP::true, 'and that its next request is refused');
# the log's units have left (1 s): what is left in Redis is the ban
my @keys = @{ $redis->cmd('KEYS', 'login:*') };
is(scalar(grep { /^login:[0-9a-f]{32}$/ } @keys), 1, 'Redis holds the ban, under a hashed name')
    or diag(explain(\@keys));
my $pttl = $redis->cmd('PTTL', $keys[0]);
ok($pttl > 0 && $pttl <= 6000 - 1500, "it expires when the ban ends ($pttl ms)");
sleep 0.05 while time < $banned_at + 6.05;
is(login('c1', 'right')->{status}, 200, 'admitted after the ban');
settled('login', ++$n);

# a ban lifted by the key API
failures('c2');
my $refused_at = time;
is(login('c2', 'right')->{status}, 429, 'c2 banned');
$r = req('/rl/zones/login/keys?key=c2', method => 'DELETE');
is($r->{status}, 200, 'key API DELETE');
is(decode_json($r->{content})->{rules}[0]{unbanned}, JSON::PP::true, 'it says the ban was lifted');
# the server that refused c2 remembers the refusal: it asks Redis again a
# second after (docs/redis.md, Refusals remembered)
sleep 0.02 while time < $refused_at + 1.05;
is(login('c2', 'right')->{status}, 200, 'admitted after the DELETE (on the other server too, within a second)');
is(login('c2', 'right')->{status}, 200, 'and again');

# ---- a charge Redis cannot take: counted, logged once ----

my $t = $fleet[0];
my $before = length $t->error_log;
my @socks;
for my $i (1 .. 5) {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . $t->port) or die "connect: $!";
    print $s "GET /slow HTTP/1.1\r\nHost: t\r\nX-Client: slow$i\r\nConnection: close\r\n\r\n";
    push @socks, $s;
}
my @heads = map { my $b = ''; sysread($_, $b, 4096); $b } @socks;   # decided in Redis: the answer starts
is(scalar(grep { /^HTTP\/1\.1 200 / } @heads), 5, '5 slow answers start, decided in Redis');
$gone->stop();
# read them all as they come: when each ends
my @ended;
my $sel = IO::Select->new(@socks);
while ($sel->count) {
    for my $s ($sel->can_read(10)) {
        next if sysread($s, my $b, 65536);
        push @ended, time;
        $sel->remove($s);
    }
}
my $spread = $ended[-1] - $ended[0];
ok(RLTest::wait_until(sub { (stats($t, 'gone')->{redis}{undelivered} // 0) == 5 }, 10),
   'Redis gone while they ran: 5 charges counted undelivered');
is(stats($t, 'gone')->{rules}{slow}{charged} // 0, 0, 'none counted as charged');
my ($lines, $folded) = $t->wait_folded(
    qr/\[error\] .*ratelimit: redis 127\.0\.0\.1:$gport: a request's charge not delivered in zone "gone" \(rule "slow", 7 units\): /,
    qr/ratelimit: redis 127\.0\.0\.1:$gport: (\d+) more charges not delivered in zone "gone" \(repeats not logged one by one\)/,
    5, since => $before);
is($lines + $folded, 5, 'each logged or counted in a folded line');
SKIP: {
    skip "the requests ended ${spread}s apart", 1 if $spread >= 0.9;
    ok($lines >= 1 && $lines <= 2 && $folded >= 3,
       "logged once a worker (2), the rest folded: $lines line(s), $folded folded (they ended ${spread}s apart)");
}

# Redis down when the request comes: on_redis_error decides, and charges
# where it decided (local: in this server's zone; allow: nothing reserved,
# nothing charged)
$r = $t->get('/fast', { 'X-Client' => 'late' });
is($r->{status}, 200, 'Redis down: decided by on_redis_error=local');
ok(RLTest::wait_until(sub { (stats($t, 'gone')->{rules}{slow}{charged} // 0) == 7 }, 5),
   'its charge settled in the local zone (7 units)');
is($t->get('/open', { 'X-Client' => 'late' })->{status}, 200, 'on_redis_error=allow: passed');
sleep 0.3;
is(stats($t, 'open')->{rules}{open}{charged} // 0, 0, 'and charged nothing');
is(stats($t, 'gone')->{redis}{undelivered}, 5, 'nor sent anything to Redis');
like(RLTest::read_file($t->prefix . '/charged.log'), qr{^/fast 200 7 fallback_local$}m,
     '$ratelimit_charged of a request decided locally');

$_->stop() for @fleet;
done_testing();
