#!/usr/bin/perl
# docs/recipes.md, run as written: each "## " section's nginx block is a
# whole http-level configuration, and its curl commands are sent as they
# are.  The only changes: `listen 8080`, files under /var/lib/nginx/ go to
# the test's prefix, and the backend's, Redis's, the load balancers' and
# the clients' addresses become the test's (a backend server in the same
# nginx, on its own port, that logs when each request reaches it).  Every
# section with an nginx block has its test here.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use POSIX qw(ceil floor);
use Time::HiRes qw(time sleep);
use IO::Socket::INET;
use RLTest;
use RLSlowUpstream;

my %recipes = RLTest::doc_blocks('docs/recipes.md', '##');
my %tested;

# A recipe's nginx, started: its block, and a backend.
sub start_recipe {
    my ($title, %o) = @_;
    my $conf = $recipes{$title}[0] // BAIL_OUT("docs/recipes.md has no recipe \"$title\"");
    my $t = RLTest->new();
    my $bport = $o{backend} // RLTest::free_port();
    like($conf, qr/^\s*listen 8080;$/m, "$title: listens on 8080");
    $conf =~ s/listen 8080;/listen 127.0.0.1:%%PORT%%;/g;
    $conf =~ s/10\.0\.0\.5:6379/127.0.0.1:$o{redis}/g if $o{redis};
    # the recipe's 50 ms budget decides locally on a machine too busy to
    # answer within it; what is checked is the fleet's count, not the load
    $conf =~ s/redis_timeout=50ms/redis_timeout=5s/g;
    $conf =~ s{/var/lib/nginx/}{%%PREFIX%%/}g;
    $t->start(<<"EOF" . $conf);
log_format arrival '\$msec \$uri';
upstream backend {
    server 127.0.0.1:$bport;
}
server {
    listen 127.0.0.1:@{[ $o{backend} ? RLTest::free_port() : $bport ]};
    access_log %%PREFIX%%/backend.log arrival;
    location / {
        ratelimit off;
        return 200 "backend\\n";
    }
    location = /login {
        ratelimit off;
        if (\$http_x_password != "right") {
            return 401 "wrong\\n";
        }
        return 200 "welcome\\n";
    }
    location /api/export/ {
        ratelimit off;
        ratelimit_bandwidth off;
        alias %%PREFIX%%/html/;
    }
    location /v1/ {
        ratelimit off;
        add_header X-Tokens-Used \$http_x_test_tokens always;
        return 200 "answer\\n";
    }
}
EOF
    return $t;
}

# A recipe's curl commands, as [method, path and query, body]:
# "curl -X PUT -d 'BODY' 'http://127.0.0.1:8080/PATH'", a line each (a
# trailing backslash continues it).
sub recipe_curls {
    my ($title) = @_;
    my @out;
    for my $b (grep { $_->{lang} eq 'sh' && ($_->{headings}[2] // '') eq $title } RLTest::doc_code('docs/recipes.md')) {
        (my $text = $b->{text}) =~ s/\\\n\s*//g;
        for my $line (split /\n/, $text) {
            next unless $line =~ /^curl(?: -X (\w+))?(?: -d '([^']*)')? 'http:\/\/127\.0\.0\.1:8080([^']+)'$/;
            push @out, [ $1 // 'GET', $3, $2 ];
        }
    }
    BAIL_OUT("docs/recipes.md: \"$title\" has no curl command") unless @out;
    return @out;
}

# seconds until the next midnight UTC
sub to_midnight { my $now = time; return 86400 - ($now - floor($now / 86400) * 86400) }

{
    my $title = 'Per-plan limits from an API key';
    $tested{$title} = 1;
    my $t = start_recipe($title);
    my $r = $t->get('/api/orders', { 'X-Api-Key' => 'k-8f3a9c' });
    is("$r->{status} $r->{content}", "200 backend\n", "$title: proxied");
    is($r->{headers}{'x-ratelimit-limit'}, 10000, "$title: a pro key's limit");
    like($r->{headers}{'ratelimit-policy'}, qr/^"per_plan";q=10000;/, "$title: ... in RateLimit-Policy");
    $r = $t->get('/api/orders', { 'X-Api-Key' => 'k-unknown' });
    is($r->{headers}{'x-ratelimit-limit'}, 100, "$title: a key with no entry: the default, 100");
    my %s = $t->pipelined('/api/orders', 'X-Api-Key', ('k-unknown') x 100);
    is("$s{200} " . ($s{429} // 0), '99 1', "$title: 100 an hour for it, then refused");
    $r = $t->get('/api/orders');
    is("$r->{status} $r->{headers}{'x-ratelimit-limit'} $r->{headers}{'x-ratelimit-remaining'}", '200 20 19',
       "$title: no key: the per-address rule");
    %s = $t->pipelined('/api/orders', 'X-None', ('') x 20);
    is("$s{200} " . ($s{429} // 0), '19 1', "$title: no key: 20 an hour");
    $t->stop();
}

{
    my $title = 'A login endpoint';
    $tested{$title} = 1;
    my $t = start_recipe($title);
    my $try = sub { my ($account, $pw) = @_;
                    $t->get('/login', { 'X-Account' => $account, 'X-Password' => $pw }) };
    is(join(' ', map { $try->('alice', 'right')->{status} } 1 .. 20), join(' ', (200) x 20),
       "$title: 20 successful logins in a row, all served");
    is(join(' ', map { $try->('alice', 'guess')->{status} } 1 .. 5), '401 401 401 401 401', "$title: 5 failures");
    my $r = $try->('alice', 'right');
    is("$r->{status} $r->{headers}{'retry-after'}", '429 3600', "$title: then the right password too is refused, for an hour");
    is($try->('bob', 'right')->{status}, 429, "$title: the address is banned too, whatever the account");
    like($t->error_log, qr/rejected by rule "failures_per_address" in zone "login", key fingerprint [0-9a-f]{16}/,
         "$title: the refused address logged, by its fingerprint");
    $t->stop();
}

{
    my $title = 'An LLM backend: 2 at once per key, 60 a minute';
    $tested{$title} = 1;
    my $up = RLSlowUpstream->new->start;
    my $t = start_recipe($title, backend => $up->port);
    # five answers streaming 1 s each, asked at once: 2 at a time, the
    # others wait their turn (within 10 s)
    my @st = RLTest::parallel({ gap => 0.1 },
        map { sub { $t->get('/v1/chat/x', { 'X-Api-Key' => 'k1', 'X-Hold' => 1000 })->{status} } } 1 .. 5);
    is("@st", '200 200 200 200 200', "$title: five at once, all served");
    is($up->most, 2, "$title: never more than 2 at the backend");
    my $t0 = time;
    my %s = $t->pipelined('/v1/chat/x', 'X-Api-Key', ('k2') x 65);
    my $most = 60 + int(time - $t0 + 1);   # and one a second comes back
    ok($s{200} >= 60 && $s{200} <= $most && $s{200} + $s{429} == 65,
       "$title: 60 a minute for a key, then refused ($s{200} served in " . sprintf('%.1f', time - $t0) . ' s)');
    $t->stop();
    $up->stop();
}

{
    my $title = 'Protect a backend that slows down under load';
    $tested{$title} = 1;
    my $up = RLSlowUpstream->new->start;
    my $t = start_recipe($title, backend => $up->port);
    # twenty requests held 2 s at once: under the 200, all served
    my @st = RLTest::parallel({ gap => 0.01 },
        map { sub { $t->get('/api/x', { 'X-Hold' => 2000 })->{status} } } 1 .. 20);
    is("@st", join(' ', ('200') x 20), "$title: under the limit, every request served");
    is($up->most, 20, "$title: all twenty at the backend at once");
    $t->stop();
    $up->stop();
}

{
    my $title = 'Keep checkout alive in a sale';
    $tested{$title} = 1;
    my $up = RLSlowUpstream->new->start;
    my $t = start_recipe($title, backend => $up->port);
    # each class reaches the backend while there is room
    is(join(' ', map { $t->get($_)->{status} } '/checkout/1', '/search?q=x', '/about'), '200 200 200',
       "$title: checkout, browse and other served below the limit");
    $t->stop();
    $up->stop();
}

{
    my $title = 'Paying tenants before free ones';
    $tested{$title} = 1;
    my $up = RLSlowUpstream->new->start;
    my $t = start_recipe($title, backend => $up->port);
    is(join(' ', map { $t->get('/api/x', { 'X-Api-Key' => $_ })->{status} } 'key-of-acme', 'unknown', ''),
       '200 200 200', "$title: a paying key, an unknown one and none served below the limit");
    $t->stop();
    $up->stop();
}

{
    my $title = 'Health checks never shed';
    $tested{$title} = 1;
    my $up = RLSlowUpstream->new->start;
    my $t = start_recipe($title, backend => $up->port);
    # traffic fills the 98 slots the probes' 2% does not keep: the 99th is
    # refused, a probe is served
    my @held = map { $t->open_request('/page', { 'X-Hold' => 20000 }) } 1 .. 98;
    RLTest::wait_until(sub { ($up->in_flight // 0) >= 98 }, 30);
    is($up->in_flight, 98, "$title: 98 requests of traffic held at the backend");
    is($t->get('/page')->{status}, 503, "$title: the 99th refused (503, an overload): the probes' share is kept");
    is($t->get('/healthz')->{status}, 200, "$title: the health check served");
    close $_ for @held;
    $t->stop();
    $up->stop();
}

{
    my $title = 'An AI endpoint limited in tokens';
    $tested{$title} = 1;
    my $t = start_recipe($title);
    my $ask = sub { my ($key, $tokens) = @_;
                    $t->get('/v1/chat', { 'X-Api-Key' => $key, 'X-Test-Tokens' => $tokens }) };
    is(join(' ', map { $ask->('k-free-1', 8000)->{status} } 1 .. 3), '200 200 200',
       "$title: three requests of 8,000 tokens against 20,000 an hour: served, the third into debt");
    my $r = $ask->('k-free-1', 8000);
    is($r->{status}, 429, "$title: the fourth refused");
    # 4,000 tokens owed and 1 for the request, at 20,000 an hour: 720.18 s
    ok($r->{headers}{'retry-after'} >= 720 && $r->{headers}{'retry-after'} <= 721,
       "$title: Retry-After repays the debt ($r->{headers}{'retry-after'} s)");
    is(join(' ', map { $ask->('k-pro-7c1e', 8000)->{status} } 1 .. 4), '200 200 200 200', "$title: a pro key has a million");
    is($r = $ask->('k-free-2', '')->{status}, 200, "$title: no header from the upstream");
    # logged in the log phase, once the response went out
    my $bad = qr/rule "tokens" in zone "ai": charge "" is not a non-negative integer, the request's cost \(1\) is charged/;
    $t->log_like($bad, "$title: ... is charged one token, and logged");
    $t->stop();
}

{
    my $title = 'A burst-friendly API';
    $tested{$title} = 1;
    my $t = start_recipe($title);
    my $r = $t->get('/api/x', { 'X-Api-Key' => 'k1' });
    is("$r->{headers}{'x-ratelimit-limit'} $r->{headers}{'x-ratelimit-remaining'}", '10 49',
       "$title: limit 10, 49 of a burst of 50 left");
    is($r->{headers}{'ratelimit'}, '"gcra_10_1s_b50";r=49;t=1', "$title: RateLimit: a token back within 1 s");
    is($r->{headers}{'ratelimit-policy'}, '"gcra_10_1s_b50";q=50;w=5', "$title: the policy: the burst, in 5 s");
    my $t0 = time;
    my %s = $t->pipelined('/api/x', 'X-Api-Key', ('k2') x 100);
    my $elapsed = time - $t0;
    my $most = 50 + floor($elapsed * 10) + 1;
    ok($s{200} >= 50 && $s{200} <= $most,
       "$title: 100 at once: the burst of 50, and what 10 a second refill meanwhile ($s{200} in "
       . sprintf('%.2f', $elapsed) . " s, at most $most)");
    is($s{200} + ($s{429} // 0), 100, "$title: the rest refused");
    $t->stop();
}

{
    my $title = 'A daily quota, its reset time in the headers';
    $tested{$title} = 1;
    my $t = start_recipe($title);
  SKIP: {
        skip 'too close to midnight UTC', 6 if to_midnight() < 30;
        my $before = to_midnight();
        my $r = $t->get('/api/x', { 'X-Api-Key' => 'k1' });
        my $after = to_midnight();
        is($r->{headers}{'x-ratelimit-remaining'}, 999, "$title: 999 left today");
        my $reset = $r->{headers}{'x-ratelimit-reset'};
        ok($reset >= floor($after) && $reset <= $before + 1,
           "$title: X-RateLimit-Reset is the seconds to midnight UTC ($reset)");
        like($r->{headers}{'ratelimit-policy'}, qr/^"daily";q=1000;w=86400$/, "$title: RateLimit-Policy a day");
        my %s = $t->pipelined('/api/x', 'X-Api-Key', ('k1') x 999);
        is($s{200}, 999, "$title: the day's 1000");
        $r = $t->get('/api/x', { 'X-Api-Key' => 'k1' });
        is($r->{status}, 429, "$title: the 1001st refused");
        my $ra = $r->{headers}{'retry-after'};
        ok($ra >= floor(to_midnight()) && $ra <= $before + 1, "$title: Retry-After: at midnight ($ra s)");
    }
    $t->stop();
}

{
    my $title = 'Shaping an upstream that cannot take bursts';
    $tested{$title} = 1;
    my $t = start_recipe($title);
    my $t0 = time;
    my ($ok, $refused, $other) = RLTest::burst(ports => [ $t->port ], path => '/report/x', key => 'k',
                                               total => 12, conns => 12);
    is($other, 0, "$title: every request answered 200 or 429");
    cmp_ok($ok, '>=', 11, "$title: 11 fit in 2 s of waiting, one every 200 ms ($ok passed, $refused refused)");
    $t->stop();
    my @at = map { (split)[0] } grep { m{ /report/x$} } split /\n/, $t->file('backend.log');
    is(scalar @at, $ok, "$title: each one passed reached the backend");
    # the k-th is released no sooner than k x 200 ms after the first arrived
    # (timers never fire early; the clock's milliseconds round)
    @at = sort { $a <=> $b } @at;
    my @late = map { sprintf('%.0f', 1000 * ($at[$_] - $t0)) } 0 .. $#at;
    ok(!grep({ $late[$_] < 200 * $_ - 1 } 0 .. $#late),
       "$title: one every 200 ms at the backend (ms after the first request: @late)");
}

{
    my $title = 'A download server: one rate per client, however many connections';
    $tested{$title} = 1;
    my $t = start_recipe($title);
    mkdir $t->prefix . '/www';
    mkdir $t->prefix . '/www/files';
    RLTest::write_file($t->prefix . "/www/files/f$_", 'x' x (2 * 1024 * 1024)) for 1 .. 4;
    my $small = time;
    is(length $t->get('/files/f1')->{content}, 2 * 1024 * 1024, "$title: a file within the burst");
    cmp_ok(time - $small, '<', 1, "$title: ... goes at once");
    sleep 4;    # the burst back
    # 4 connections, 8 MB: 4 MB and a slice at once, the rest at 1 MB/s
    my $port = $t->port;
    my $s = time;
    system('curl -s --no-progress-meter -Z --parallel-immediate '
           . join(' ', map { "-o /dev/null http://127.0.0.1:$port/files/f$_" } 1 .. 4)) == 0 or die;
    my $took = time - $s;
    ok($took > 3.4 && $took < 4.4, sprintf('%s: 8 MB over 4 connections in %.2f s, not 2', $title, $took));
    $t->stop();
}

{
    my $title = 'API egress by plan';
    $tested{$title} = 1;
    my $t = start_recipe($title);
    RLTest::write_file($t->prefix . '/html/half', 'x' x (512 * 1024));
    my $s = time;
    my $r = $t->get('/api/export/half', { 'X-Api-Key' => 'k-free' });
    my $free = time - $s;
    is(length $r->{content}, 512 * 1024, "$title: a free key's response, whole, through the proxy");
    ok($free > 1.7 && $free < 2.4, sprintf('%s: 512 KB at 256 KB/s in %.2f s', $title, $free));
    $s = time;
    $r = $t->get('/api/export/half');
    my $none = time - $s;
    is(length $r->{content}, 512 * 1024, "$title: a response to no key, whole");
    ok($none > 1.7, sprintf('%s: no key is no way around the free rate: 512 KB in %.2f s', $title, $none));
    $s = time;
    $r = $t->get('/api/export/half', { 'X-Api-Key' => 'k-8f3a9c' });
    my $pro = time - $s;
    is(length $r->{content}, 512 * 1024, "$title: a paying key's response, whole");
    cmp_ok($pro, '<', 0.8, sprintf('%s: a paying key at 4 MB/s, 512 KB in %.2f s', $title, $pro));
    $t->stop();
    like($t->file('egress.log'), qr{^k-free /api/export/half 262144 524288$}m, "$title: the rate given, logged");
    like($t->file('egress.log'), qr{^k-8f3a9c /api/export/half 4194304 524288$}m, "$title: the paying key's");
}

{
    my $title = 'One limit for a fleet of servers';
    $tested{$title} = 1;
  SKIP: {
        my $redis = RLTest::optional_redis("\"$title\" is not run") or skip 'redis-server is not installed', 4;
        my @fleet = map { start_recipe($title, redis => $redis->port) } 1 .. 2;
        my @s;
        my $t0 = time;
        push @s, $fleet[ $_ % 2 ]->get('/api/x', { 'X-Api-Key' => 'k1' })->{status} for 1 .. 101;
        # gcra: 100 at once, then one every 600 ms: a machine slow enough
        # to take that long over the 101 requests earns the key more
        my $earned = int((time - $t0) / 0.6);
        # a request Redis did not answer in time is decided by the server
        # alone (on_redis_error=local, counted as a fallback): exact when
        # there is none
        # (the recipe's server has no stats: its error log says so)
        my @late = map { $_->error_log =~ /(\[\w+\] [^\n]*ratelimit[^\n]*redis[^\n]*)/ ? $1 : () } @fleet;
        if (@late) {
            diag("decided by on_redis_error=local: @late");
            cmp_ok(scalar(grep { $_ == 200 } @s), '<=', 101, "$title: 100 a minute, and those decided locally");
            pass("$title: the 101st, decided locally");
        } elsif ($earned) {
            my $ok = grep { $_ == 200 } @s;
            ok($ok >= 100 && $ok <= 100 + $earned,
               "$title: 100 a minute across two servers, and $earned more earned in the requests' time ($ok)");
            pass("$title: the 101st, after one was earned");
        } else {
            is(scalar(grep { $_ == 200 } @s), 100, "$title: 100 a minute across two servers");
            is($s[-1], 429, "$title: the 101st refused, whichever server");
        }
        $_->stop for @fleet;
        $redis->stop;
    }
}

{
    my $title = "Raising one customer's limit for a week";
    $tested{$title} = 1;
    my $t = start_recipe($title);
    my %s = $t->pipelined('/api/x', 'X-Api-Key', ('cust-42') x 101);
    is("$s{200} $s{429}", '100 1', "$title: 100 an hour, then refused");
    my ($put) = recipe_curls($title);
    my $r = $t->request(@$put[ 0, 1 ], {}, $put->[2]);
    is($r->{status}, 200, "$title: the curl command sets the override") or diag($r->{content});
    my $o = RLTest::json_of($r)->{override};
    ok($o->{expires_in_ms} > 7 * 86400_000 - 60_000 && $o->{expires_in_ms} <= 7 * 86400_000,
       "$title: for 7 days ($o->{expires_in_ms} ms)");
    $r = $t->get('/api/x', { 'X-Api-Key' => 'cust-42' });
    is("$r->{status} $r->{headers}{'x-ratelimit-limit'} $r->{headers}{'x-ratelimit-remaining'}", '200 1000 899',
       "$title: 1,000 an hour, the 100 spent counted");
    is($t->get('/api/x', { 'X-Api-Key' => 'other' })->{headers}{'x-ratelimit-limit'}, 100,
       "$title: other keys keep 100");
    RLTest::wait_until(sub { -s $t->prefix . '/api.overrides' && RLTest::read_file($t->prefix . '/api.overrides') =~ /cust-42/ }, 5);
    $t->stop;
    $t->start;
    $r = $t->get('/api/x', { 'X-Api-Key' => 'cust-42' });
    is("$r->{status} $r->{headers}{'x-ratelimit-limit'}", '200 1000', "$title: a restart keeps the override");
    $t->stop;
}

{
    my $title = 'Refusing an address range during an attack';
    $tested{$title} = 1;
    my $t = start_recipe($title);
    # from an address of the test's loopback network: 127.0.0.2
    my $from = sub {
        my ($addr) = @_;
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port, LocalAddr => $addr)
            or die "connect from $addr: $!\n";
        print $s "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
        local $/;
        my $answer = <$s>;
        my ($status) = $answer =~ m{^HTTP/1\.\d (\d+)};
        my ($ra) = $answer =~ /^Retry-After: (\d+)/mi;
        my ($limit) = $answer =~ /^X-RateLimit-Limit: (\d+)/mi;
        return ($status, $ra, $limit);
    };
    is(($from->('127.0.0.1'))[0], 200, "$title: served before");
    my ($deny, $allow) = recipe_curls($title);
    s{range=203\.0\.113\.0/24}{range=127.0.0.0/24} for $deny->[1];
    s{range=203\.0\.113\.7/32}{range=127.0.0.2/32} for $allow->[1];
    is($t->request(@$deny[ 0, 1 ], {}, $deny->[2])->{status}, 200, "$title: the network denied");
    my ($status, $ra) = $from->('127.0.0.1');
    ok($status == 429 && $ra >= 3599 && $ra <= 3600, "$title: an address of it refused, Retry-After $ra s: the hour left");
    is($t->request(@$allow[ 0, 1 ], {}, $allow->[2])->{status}, 200, "$title: the partner's address allowed");
    my ($ok, undef, $limit) = $from->('127.0.0.2');
    is($ok, 200, "$title: the partner's address served");
    is($limit, undef, "$title: exempt from the rule: no rate-limit headers");
    is(($from->('127.0.0.3'))[0], 429, "$title: the rest of the network still refused");
    $t->stop;
}

{
    my $title = 'At most N exports per customer across the fleet';
    $tested{$title} = 1;
  SKIP: {
        my $redis = RLTest::optional_redis("\"$title\" is not run") or skip 'redis-server is not installed', 9;
        my $up = RLSlowUpstream->new->start;
        my @fleet = map { start_recipe($title, redis => $redis->port, backend => $up->port) } 1 .. 2;
        # five exports of one customer at once over two servers, each
        # running 1.5 s: 3 run, 2 refused at once
        my @st = RLTest::parallel({ gap => 0.05 },
            map { my $t = $fleet[ $_ % 2 ];
                  sub { $t->get('/export/x', { 'X-Customer' => 'acme', 'X-Hold' => 1500 })->{status} } } 1 .. 5);
        is(join(' ', sort @st), '200 200 200 429 429', "$title: 3 at once across two servers, the others refused");
        is($up->most, 3, "$title: never more than 3 at the backend");
        is($fleet[0]->get('/export/x', { 'X-Customer' => 'acme' })->{status}, 200,
           "$title: a slot is back once an export ends");
        $_->stop for @fleet;
        $up->stop;
        $redis->stop;
    }
}

# a backend that sends rate-limit headers of its own
sub own_headers_backend {
    my $port = RLTest::free_port();
    return <<"EOF";
upstream backend {
    server 127.0.0.1:$port;
}
server {
    listen 127.0.0.1:$port;
    location / {
        add_header X-RateLimit-Limit 5000;
        add_header X-RateLimit-Remaining 4999;
        add_header RateLimit-Policy '"upstream";q=5000;w=3600';
        return 200 "backend\\n";
    }
}
EOF
}

{
    my $title = 'Behind a reverse proxy';
    $tested{$title} = 1;
    my $conf = $recipes{$title}[0] // BAIL_OUT("docs/recipes.md has no recipe \"$title\"");
    like($conf, qr{^set_real_ip_from 10\.0\.0\.0/8;$}m, "$title: trusts the load balancers");
    $conf =~ s{10\.0\.0\.0/8}{127.0.0.1};
    $conf =~ s/listen 8080;/listen 127.0.0.1:%%PORT%%;/;

    my $t = RLTest->new->start($conf . own_headers_backend());

    my $get = sub { $t->get('/api/users', { @_ }) };
    my $r = $get->('X-Forwarded-For' => '203.0.113.7');
    is($r->{status}, 200, "$title: a request passes");
    is($r->{headers}{'x-ratelimit-limit'}, '100', "$title: one X-RateLimit-Limit, this module's");
    is($r->{headers}{'x-ratelimit-remaining'}, '99', "$title: one X-RateLimit-Remaining, this module's");
    ok(!exists $r->{headers}{'ratelimit-policy'}, "$title: the backend's RateLimit-Policy is hidden");
    is($get->('X-Forwarded-For' => '203.0.113.7')->{headers}{'x-ratelimit-remaining'}, 98,
       "$title: the client behind the proxy is the key");
    is($get->('X-Forwarded-For' => '203.0.113.8')->{headers}{'x-ratelimit-remaining'}, 99,
       "$title: another client has its own budget");
    is($get->('X-Forwarded-For' => '198.51.100.1, 203.0.113.7')->{headers}{'x-ratelimit-remaining'}, 97,
       "$title: the rightmost untrusted address is the client");
    is($get->('X-Api-Key' => 'abc', 'X-Forwarded-For' => '203.0.113.7')->{headers}{'x-ratelimit-remaining'}, 99,
       "$title: with an API key, the key has its own budget");
    is($get->('X-Api-Key' => 'abc', 'X-Forwarded-For' => '203.0.113.9')->{headers}{'x-ratelimit-remaining'}, 98,
       "$title: from any address");
    $t->stop();
}

# the same login form, before and after
{
    my $title = 'Coming from limit_req';
    $tested{$title} = 1;
    my ($before, $after) = @{ $recipes{$title} // [] };
    BAIL_OUT("no before/after examples in \"$title\"") unless $after;
    like($before, qr/limit_req zone=login burst=5 nodelay;/, "$title: the before");
    like($after, qr/ratelimit zone=login limit=6 period=1m burst=6;/, "$title: the after");

    my %seen;
    for my $case ([ 'limit_req', $before ], [ 'ratelimit', $after ]) {
        my ($name, $conf) = @$case;
        $conf =~ s/listen 8080;/listen 127.0.0.1:%%PORT%%;/;
        my $t = RLTest->new->start($conf . own_headers_backend());
        # seven attempts in a row (the next is allowed 10 s after the first)
        $seen{$name} = $t->statuses('/login', 7);
        is($seen{$name}, '200 200 200 200 200 200 429', "$title: $name: six attempts pass, the seventh is rejected");
        $t->stop();
    }
    is($seen{ratelimit}, $seen{limit_req}, "$title: limit_req and its ratelimit equivalent decide alike");
}

{
    my $title = 'Rate-limiting a gRPC service behind nginx';
    $tested{$title} = 1;
    SKIP: {
        require RLGrpc;
        my $why = RLGrpc::missing();
        skip $why, 9 if $why;
        my $g = RLGrpc->new->start;
        my $conf = $recipes{$title}[0];
        like($conf, qr/^\s*listen 8080 http2;/m, "$title: listens on 8080, h2c");
        my $listen = RLGrpc::h2c_listen('127.0.0.1:%%PORT%%');
        $conf =~ s/listen 8080 http2;/$listen/;
        $conf =~ s/127\.0\.0\.1:50051/127.0.0.1:@{[ $g->port ]}/;
        my $t = RLTest->new();
        $t->write_conf($conf);
        $t->start();
        my $call = { method => '/shop.Orders/Create', metadata => [ [ 'x-api-key', 'k1' ] ] };
        my @r = $g->call('127.0.0.1:' . $t->port, ($call) x 150);
        is(scalar(grep { $_->{code} eq 'OK' } @r[0 .. 99]), 100, "$title: 100 calls served at once");
        # gcra gives a call back every 600 ms: the 100th's budget left is
        # what came back while the 100 went through
        my $window = ($r[99]{end} - $r[0]{start}) * 1000;
        ok($r[99]{initial_md}{'x-ratelimit-remaining'} <= $window / 600,
           "$title: the 100th: $r[99]{initial_md}{'x-ratelimit-remaining'} left after $window ms");
        my ($refused) = grep { $_->{code} ne 'OK' } @r;
        ok($refused, "$title: a call refused, faster than one each 600 ms");
        is($refused->{code}, 'RESOURCE_EXHAUSTED', "$title: refused as gRPC");
        like($refused->{details}, qr/^rate limit exceeded, retry in 1 s$/, "$title: $refused->{details}");
        my $p = $refused->{trailing_md}{'grpc-retry-pushback-ms'};
        ok($p > 0 && $p <= 600, "$title: pushback $p ms: at most the 600 ms to the next call back");
        is($refused->{trailing_md}{'x-ratelimit-limit'}, 100, "$title: the rate-limit metadata");
        my $retry = { %$call, service_config => { methodConfig => [ { name => [ { service => 'shop.Orders' } ],
            retryPolicy => { maxAttempts => 3, initialBackoff => '0.1s', maxBackoff => '1s', backoffMultiplier => 2,
                             retryableStatusCodes => ['RESOURCE_EXHAUSTED'] } } ] } };
        ($r[0]) = $g->call('127.0.0.1:' . $t->port, $retry);
        is($r[0]{code}, 'OK', "$title: a client retrying RESOURCE_EXHAUSTED waits the pushback and is served");
        $t->stop();
        $g->stop();
    }
}

is_deeply([ sort keys %tested ], [ sort keys %recipes ], 'every recipe of docs/recipes.md is run here');

done_testing();
