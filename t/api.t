#!/usr/bin/perl
# ratelimit_api, the key API, through nginx with two workers: a key spent,
# seen in the API as its refusal's headers showed it, reset (logged at
# notice with the client, never with a secret key), and admitted afresh;
# writes refused where not enabled, and nginx's own access control in
# front; every bad path, parameter and method a JSON error, never a 5xx;
# the keys a rule refuses most: three keys refused 600, 300 and 100 times
# among 1,000 refused once come out on top with exactly those counts, and a
# flood of distinct keys leaves the zone's memory unchanged and the heavy
# key listed; the same in Prometheus.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use JSON::PP;
use RLTest qw(json_of);

# a Redis zone: a real Redis where redis-server is installed
my $redis = RLTest::optional_redis('a Redis zone\'s refusals are not tested');
my $rport = $redis ? $redis->port : 1;

my $t = RLTest->new();
$t->put_file('htpasswd', "ops:{PLAIN}secret\n");
$t->start(<<'EOF' =~ s/%%RPORT%%/$rport/r, workers => 2);
keepalive_requests 100000000;
ratelimit_zone api 1m;
ratelimit_zone r 1m redis=127.0.0.1:%%RPORT%% redis_timeout=5s on_redis_error=allow;
map $http_x_k $flood_cost {
    default 2;
}
server {
    listen 127.0.0.1:%%PORT%%;
    add_header X-Fingerprint $ratelimit_fingerprint always;

    location /p/ {
        ratelimit zone=api key=$http_x_user limit=3 period=1h name=per_user log_key=on;
        ratelimit zone=api key=$http_x_ip limit=5 period=1h name=per_ip;
        alias %%PREFIX%%/html/;
    }
    location /w/ {
        ratelimit zone=api key=$http_x_user algorithm=sliding_window limit=2 period=1h name=win;
        alias %%PREFIX%%/html/;
    }
    # every request refused: a cost (2) beyond the burst (1)
    location /flood/ {
        ratelimit zone=api key=$http_x_k limit=1 period=1h cost=$flood_cost name=flood;
        ratelimit_log_level off;
        alias %%PREFIX%%/html/;
    }
    location /redis/ {
        ratelimit zone=r key=$http_x_user limit=1 period=1h name=remote;
        alias %%PREFIX%%/html/;
    }

    location /rl/ { ratelimit_api write=on; allow 127.0.0.1; deny all; }
    location /ro/ { ratelimit_api; }
    location /denied/ { ratelimit_api write=on; deny all; }
    location /basic/ {
        auth_basic "rate limits";
        auth_basic_user_file %%PREFIX%%/htpasswd;
        ratelimit_api write=on;
    }
    location /noslash { ratelimit_api; }
    location = /stats { ratelimit_stats; }
}
EOF

sub req {
    my ($method, $path, %h) = @_;
    return $t->request($method, $path, \%h);
}

# ---- nginx -t ----

for my $case (
    [ 'location ~ ^/rl/ { ratelimit_api; }', qr/"ratelimit_api" directive: location "\^\/rl\/" is not a prefix location/ ],
    [ 'location @rl { ratelimit_api; }', qr/location "\@rl" is not a prefix location/ ],
    [ 'location = /rl/zones { ratelimit_api; }', qr/location "\/rl\/zones" is not a prefix location/ ],
    [ 'location /rl/ { ratelimit_api write=yes; }',
      qr/"ratelimit_api" directive: unknown parameter "write=yes": expected write=on or write=off/ ],
    [ 'location /rl/ { ratelimit_api; ratelimit_api; }', qr/"ratelimit_api" directive is duplicate/ ],
    [ 'location /rl/ { ratelimit_api a b; }', qr/invalid number of arguments in "ratelimit_api"/ ],
    [ 'ratelimit_api;', qr/"ratelimit_api" directive is not allowed here/ ],
) {
    $t->conf_refused("server { listen 127.0.0.1:%%PORT%%; $case->[0] }", $case->[1], $case->[0]);
}

# the example of docs/directives.md passes nginx -t
{
    my ($block) = @{ { RLTest::doc_blocks('docs/directives.md', '##') }->{ratelimit_api} // [] };
    like($block // '', qr/ratelimit_api write=on;/, 'docs/directives.md: a ratelimit_api example');
    my ($rc, $out) = $t->test_conf("server { listen 127.0.0.1:%%PORT%%; $block }");
    is($rc, 0, 'docs/directives.md: its example passes nginx -t') or diag($out);
}

# ---- zones ----

my $r = req('GET', '/rl/zones');
is($r->{status}, 200, 'zones: 200');
is($r->{headers}{'content-type'}, 'application/json', 'zones: JSON');
is($r->{headers}{'cache-control'}, 'no-store', 'zones: never cached');
my $z = json_of($r);
is($z->{write}, JSON::PP::true, 'zones: write=on says so');
is($z->{top_epoch_ms}, 60000, 'zones: the top keys\' epoch');
like($z->{version}, qr/^\d+\.\d+\.\d+/, 'zones: the version');
is_deeply($z->{zones}{api}{rules}{per_user},
          { algorithm => 'gcra', key => '$http_x_user', limit => 3, period_ms => 3600000, burst => 3,
            log_key => JSON::PP::true }, 'zones: a rule as configured');
is_deeply($z->{zones}{api}{rules}{win},
          { algorithm => 'sliding_window', key => '$http_x_user', limit => 2, period_ms => 3600000,
            buckets => 10, log_key => JSON::PP::false }, 'zones: a sliding_window rule');
is($z->{zones}{api}{size}, 1048576, 'zones: the zone\'s figures, as ratelimit_stats');
ok(exists $z->{zones}{api}{capacity} && exists $z->{zones}{api}{summary_refusals}, 'zones: capacity, summary');
is($z->{zones}{api}{redis}, JSON::PP::false, 'zones: a local zone');
is($z->{zones}{r}{redis}, JSON::PP::true, 'zones: a Redis zone');
is(json_of(req('GET', '/ro/zones'))->{write}, JSON::PP::false, 'zones: read-only by default');
my $one = json_of(req('GET', '/rl/zones/api'));
is($one->{zone}, 'api', 'zones/NAME: the zone');
is($one->{rules}{per_ip}{limit}, 5, 'zones/NAME: its rules');
is(req('GET', '/noslash/zones')->{status}, 200, 'a prefix without "/": NAME/zones');
is(req('GET', '/noslashzones')->{status}, 404, 'a prefix without "/": not NAMEzones');
$r = req('HEAD', '/rl/zones');
is($r->{status}, 200, 'HEAD: 200');
is($r->{content} // '', '', 'HEAD: no body');

# ---- a key spent, looked up, reset ----

my @seen = map { $t->get_as('/p/index.html', user => 'alice') } 1 .. 4;
is(join(' ', map { $_->{status} } @seen), '200 200 200 429', 'alice: three admitted, the fourth refused');
my $refusal = $seen[3];
my $fp = $refusal->{headers}{'x-fingerprint'};

$r = req('GET', '/rl/zones/api/keys?key=alice');
is($r->{status}, 200, 'keys: 200');
my $k = json_of($r);
is($k->{zone}, 'api', 'keys: the zone');
is($k->{key}, 'alice', 'keys: the key');
my %by = map { $_->{rule} => $_ } @{ $k->{rules} };
is_deeply([ sort keys %by ], [ 'flood', 'per_ip', 'per_user', 'win' ], 'keys: a state in each rule of the zone');
my $u = $by{per_user};
is($u->{fingerprint}, $fp, 'keys: the fingerprint its refusal showed ($ratelimit_fingerprint)');
is($u->{state}, 'held', 'keys: held in the zone');
is($u->{refused}, JSON::PP::true, 'keys: refused now');
is($u->{remaining}, 0, 'keys: nothing remaining');
cmp_ok($u->{retry_after}, '<=', $refusal->{headers}{'retry-after'}, 'keys: Retry-After as the refusal\'s, or less');
cmp_ok($u->{retry_after}, '>=', $refusal->{headers}{'retry-after'} - 2, 'keys: ... by the seconds gone since');
is($u->{retry_after}, int(($u->{retry_after_ms} + 999) / 1000), 'keys: seconds rounded up from the ms');
cmp_ok($u->{reset_ms}, '>', 3590000, 'keys: back to full budget in about an hour');
is($u->{limit}, 3, 'keys: the limit');
is($by{per_ip}{state}, 'none', 'keys: another rule has no state for it');
is($by{per_ip}{remaining}, 5, 'keys: and all its budget');
is($by{per_ip}{refused}, JSON::PP::false, 'keys: and admits it');

$k = json_of(req('GET', '/rl/zones/api/keys?key=alice&rule=per_user'));
is(scalar @{ $k->{rules} }, 1, 'keys&rule=: one rule');
$k = json_of(req('GET', "/rl/zones/api/keys?fingerprint=$fp&rule=per_user"));
is($k->{fingerprint}, $fp, 'keys by fingerprint');
is($k->{rules}[0]{state}, 'held', 'keys by fingerprint: the same state');
is($k->{rules}[0]{refused}, JSON::PP::true, 'keys by fingerprint: refused');

# a URL-encoded key, and one with a byte outside ASCII
$t->get_as('/p/index.html', user => 'x y&z=1/2"') for 1 .. 2;
$k = json_of(req('GET', '/rl/zones/api/keys?key=x%20y%26z%3D1%2F2%22&rule=per_user'));
is($k->{key}, 'x y&z=1/2\x22', 'keys: %-decoded, shown escaped as the log shows it');
is($k->{rules}[0]{remaining}, 1, 'keys: its state (2 of 3 spent)');
$k = json_of(req('GET', '/rl/zones/api/keys?key=caf%C3%A9&rule=per_user'));
is($k->{key}, 'caf\xc3\xa9', 'keys: bytes outside ASCII, escaped');

# writes: refused where not enabled, by nginx's access control too
$r = req('DELETE', '/ro/zones/api/keys?key=alice');
is($r->{status}, 403, 'read-only: DELETE refused');
like(json_of($r)->{error} // '', qr/writes are not enabled here \(ratelimit_api write=on enables them\)/,
     'read-only: a JSON error saying why');
is($t->get_as('/p/index.html', user => 'alice')->{status}, 429, 'read-only: alice still refused');
is(req('GET', '/denied/zones')->{status}, 403, 'deny all: nginx refuses before the API');
is(req('DELETE', '/denied/zones/api/keys?key=alice')->{status}, 403, 'deny all: a DELETE too');
is(req('GET', '/basic/zones')->{status}, 401, 'auth_basic: a password needed');

$r = req('DELETE', '/rl/zones/api/keys?key=alice');
is($r->{status}, 200, 'reset: 200');
$k = json_of($r);
%by = map { $_->{rule} => $_ } @{ $k->{rules} };
is($by{per_user}{held}, JSON::PP::true, 'reset: per_user held it');
is($by{per_user}{forgiven}, JSON::PP::false, 'reset: nothing owed in the summary');
is($by{per_ip}{held}, JSON::PP::false, 'reset: per_ip had nothing');
$r = $t->get_as('/p/index.html', user => 'alice');
is($r->{status}, 200, 'reset: alice admitted');
is($r->{headers}{'x-ratelimit-remaining'}, 2, 'reset: with a full budget (3, this one spent)');
my $log = $t->error_log;
like($log, qr/\[notice\] .*ratelimit: key "alice" reset in rule "per_user" of zone "api" by the key API \(it was held\), client 127\.0\.0\.1/,
     'reset: logged at notice, the key as its rule logs it, the client');
like($log, qr/ratelimit: key fingerprint [0-9a-f]{16} reset in rule "per_ip" of zone "api" by the key API \(it had no state\)/,
     'reset: each rule\'s line');

# by fingerprint, with auth_basic: the user in the log; a secret key never in it
my $secret = 'sk_live_9a8b7c6d';
@seen = map { $t->get_as('/p/index.html', ip => $secret) } 1 .. 6;
is($seen[5]{status}, 429, 'per_ip: the sixth refused');
my $fp_ip = $seen[5]{headers}{'x-fingerprint'};
$r = req('DELETE', "/basic/zones/api/keys?fingerprint=$fp_ip&rule=per_ip", Authorization => RLTest::basic_auth('ops:secret'));
is($r->{status}, 200, 'reset by fingerprint, behind auth_basic');
is(json_of($r)->{rules}[0]{held}, JSON::PP::true, 'reset by fingerprint: held');
is($t->get_as('/p/index.html', ip => $secret)->{status}, 200, 'reset by fingerprint: admitted');
like($t->error_log, qr/key fingerprint $fp_ip reset in rule "per_ip" of zone "api" by the key API \(it was held\), client 127\.0\.0\.1, user "ops"/,
     'reset by fingerprint: logged with the user');
$t->get_as('/p/index.html', ip => $secret) for 1 .. 5;
is(req('DELETE', "/rl/zones/api/keys?key=$secret")->{status}, 200, 'reset of a secret key, in every rule');
unlike($t->error_log, qr/\Q$secret\E/,
       'the secret key is never in the error log (per_user logs keys in clear, but had no state for it)');

# a sliding_window rule (a state in a block)
$t->get_as('/w/index.html', user => 'wendy') for 1 .. 3;
$k = json_of(req('GET', '/rl/zones/api/keys?key=wendy&rule=win'));
is($k->{rules}[0]{refused}, JSON::PP::true, 'sliding_window: refused');
req('DELETE', '/rl/zones/api/keys?key=wendy&rule=win');
is($t->get_as('/w/index.html', user => 'wendy')->{status}, 200, 'sliding_window: reset, admitted');

# a Redis zone: its keys read in Redis (t/api_redis.t); without a Redis, a
# 409 saying so, never a 5xx
$r = req('GET', '/rl/zones/r/keys?key=a');
if ($redis) {
    is($r->{status}, 200, 'Redis zone: a key look-up answered from Redis');
    is(json_of($r)->{rules}[0]{remaining}, 1, 'Redis zone: a fresh key\'s budget');
} else {
    is($r->{status}, 409, 'Redis zone, no Redis: a key look-up answered 409');
    like(json_of($r)->{error} // '', qr/zone "r" is decided in Redis, which did not answer/, 'Redis zone: says why');
}
$r = req('GET', '/rl/zones/r/top');
is($r->{status}, 200, 'Redis zone: its top keys');
is(json_of($r)->{scope}, 'server', 'Redis zone: this server\'s refusals, it says');
SKIP: {
    skip 'no redis-server', 3 unless $redis;
    my @r = map { $t->get_as('/redis/index.html', user => 'rita') } 1 .. 3;
    is(join(' ', map { $_->{status} } @r), '200 429 429', 'Redis zone: refused by Redis');
    my $rt = json_of(req('GET', '/rl/zones/r/top'))->{rules}{remote};
    is($rt->{state}, 'kept', 'Redis zone: its refusals counted here');
    is_deeply($rt->{keys}, [ { fingerprint => $r[1]{headers}{'x-fingerprint'}, refused => 2, error => 0 } ],
              'Redis zone: the key refused, twice');
}

# ---- bad paths, parameters and methods: JSON errors, never 5xx ----

my $long = 'x' x 4097;
for my $case (
    [ GET => '/rl/', 404, qr/no such resource/ ],
    [ GET => '/rl/zone', 404, qr/no such resource/ ],
    [ GET => '/rl/zones/', 404, qr/no such resource/ ],
    [ GET => '/rl/zones/nope', 404, qr/no zone "nope"/ ],
    [ GET => '/rl/zones/%FF%22%5C/keys?key=a', 404, qr/no zone "\\xff\\x22\\x5c"/ ],
    [ GET => '/rl/zones/api/keysx', 404, qr/no such resource/ ],
    [ GET => '/rl/zones/api/keys/x', 404, qr/no such resource/ ],
    [ GET => '/rl/zones/api/top/', 404, qr/no such resource/ ],
    [ GET => '/rl/zones/api/keys', 400, qr/which key\? expected key=K/ ],
    [ GET => '/rl/zones/api/keys?key=', 400, qr/an empty key/ ],
    [ GET => '/rl/zones/api/keys?key=a&key=b', 400, qr/parameter "key" given twice/ ],
    [ GET => '/rl/zones/api/keys?kye=a', 400, qr/unknown parameter "kye" for keys: expected key=, fingerprint= or rule=/ ],
    [ GET => '/rl/zones/api/keys?key=a&fingerprint=0123456789abcdef&rule=per_ip', 400, qr/give one/ ],
    [ GET => '/rl/zones/api/keys?fingerprint=0123456789abcdef', 400, qr/give rule= too/ ],
    [ GET => '/rl/zones/api/keys?fingerprint=xyz&rule=per_ip', 400, qr/expected 16 hex digits/ ],
    [ GET => '/rl/zones/api/keys?fingerprint=0123456789abcdeg&rule=per_ip', 400, qr/expected 16 hex digits/ ],
    [ GET => '/rl/zones/api/keys?key=%zz', 400, qr/a % not followed by two hex digits/ ],
    [ GET => '/rl/zones/api/keys?key=a%2', 400, qr/a % not followed by two hex digits/ ],
    [ GET => "/rl/zones/api/keys?key=$long", 400, qr/parameter "key" longer than 4096 bytes/ ],
    [ GET => '/rl/zones/api/keys?key=a&rule=nope', 404, qr/zone "api" has no rule "nope"/ ],
    [ GET => '/rl/zones/api/keys?key=a&rule=' . ('r' x 64), 400, qr/rule=: expected a rule's name/ ],
    [ GET => '/rl/zones/api/top?key=a', 400, qr/unknown parameter "key" for top: expected rule=/ ],
    [ GET => '/rl/zones/api/top?rule=nope', 404, qr/has no rule "nope"/ ],
    [ GET => '/rl/zones?x=1', 400, qr/unknown parameter "x" for zones: expected none/ ],
    [ POST => '/rl/zones', 405, qr/method POST not allowed on zones: GET, HEAD/ ],
    [ DELETE => '/rl/zones/api', 405, qr/method DELETE not allowed on zone: GET, HEAD/ ],
    [ PUT => '/rl/zones/api/keys?key=a', 405, qr/method PUT not allowed on keys: GET, HEAD, DELETE/ ],
    [ DELETE => '/rl/zones/api/top', 405, qr/not allowed on top/ ],
) {
    my ($method, $path, $status, $re) = @$case;
    my $name = "$method " . substr($path, 0, 60);
    $r = req($method, $path);
    is($r->{status}, $status, "$name: $status");
    my $j = json_of($r);
    ok($j && defined $j->{error}, "$name: a JSON error") or diag($r->{content});
    like($j->{error} // '', $re, "$name: says what");
}
$r = req('PUT', '/rl/zones/api/keys?key=a');
is($r->{headers}{allow}, 'GET, HEAD, DELETE', '405: Allow');
is($r->{headers}{'content-type'}, 'application/json', 'an error: JSON');
$r = req('POST', '/rl/zones/api/keys?key=a', 'Content-Length' => 0);
is($r->{status}, 405, 'POST with a body: 405');

# ---- the keys a rule refuses most ----

# requests on one keep-alive connection, pipelined 200 at a time, one for
# each key (X-K): every one refused by the rule flood
sub flood {
    my (@keys) = @_;
    my %status = $t->pipelined('/flood/index.html', 'X-K', @keys);
    return $status{429} // 0;
}

my $first = $t->get_as('/flood/index.html', k => 'heavy-a');
is($first->{status}, 429, 'flood: a request refused');
my %fps = ('heavy-a' => $first->{headers}{'x-fingerprint'});
$fps{$_} = $t->get_as('/flood/index.html', k => $_)->{headers}{'x-fingerprint'} for qw(heavy-b heavy-c);
my $sent = 3;
$sent += flood(('heavy-a') x 599, ('heavy-b') x 299, ('heavy-c') x 99);
$sent += flood(map { "light-$_" } 1 .. 1000);
is($sent, 2000, 'flood: 2,000 refusals');
my $top = json_of(req('GET', '/rl/zones/api/top?rule=flood'));
my $f = $top->{rules}{flood};
is($f->{state}, 'kept', 'top: kept');
is($f->{entries}, 32, 'top: 32 entries');
cmp_ok($f->{refusals}, '>=', 2000, 'top: every refusal counted');  # a minute boundary would split, not lose, them
is_deeply([ map { [ $_->{fingerprint}, $_->{refused}, $_->{error} ] } @{ $f->{keys} }[0 .. 2] ],
          [ [ $fps{'heavy-a'}, 600, 0 ], [ $fps{'heavy-b'}, 300, 0 ], [ $fps{'heavy-c'}, 100, 0 ] ],
          'top: 600, 300 and 100, in that order, exactly');
ok(!grep({ exists $_->{key} } @{ $f->{keys} }), 'top: no key in clear for a rule that does not log them');
cmp_ok($f->{keys}[3]{refused}, '<', 100, 'top: the light keys below');
like($top->{since_ms}, qr/^\d+000$/, 'top: since when');
is_deeply([ sort keys %{ $top->{rules} } ], ['flood'], 'top?rule=: that rule only');

$top = json_of(req('GET', '/rl/zones/api/top'));
is_deeply([ sort keys %{ $top->{rules} } ], [ qw(flood per_ip per_user win) ], 'top: every rule of the zone');
my ($alice) = grep { $_->{fingerprint} eq $fp } @{ $top->{rules}{per_user}{keys} };
ok(!$alice, 'top: a reset key leaves the list');
$t->get_as('/p/index.html', user => 'alice') for 1 .. 3;   # 2 admitted, 1 refused
$top = json_of(req('GET', '/rl/zones/api/top?rule=per_user'));
($alice) = grep { $_->{fingerprint} eq $fp } @{ $top->{rules}{per_user}{keys} };
is($alice->{key}, 'alice', 'top: the key in clear where the rule logs keys so');
is($alice->{refused}, 1, 'top: refused once since its reset');
is(json_of(req('GET', '/rl/zones/api/top?rule=win'))->{rules}{win}{state}, 'kept', 'top: win refused wendy');

# a flood of 100,000 distinct keys: the zone's memory unchanged, the heavy
# key listed
my $fp_d = $t->get_as('/flood/index.html', k => 'heavy-d')->{headers}{'x-fingerprint'};   # refused once
my $before = json_of(req('GET', '/stats'))->{zones}{api};
my @keys;
for my $i (1 .. 100_000) {
    push @keys, "flood-$i";
    push @keys, 'heavy-d' if $i % 25 == 0;
}
is(flood(@keys), 104_000, 'a flood of 100,000 distinct keys refused, and one heavy key 4,000 times');
my $after = json_of(req('GET', '/stats'))->{zones}{api};
is($after->{bytes_used}, $before->{bytes_used}, 'the flood: the zone\'s memory unchanged');
is($after->{keys}, $before->{keys}, 'the flood: its keys unchanged');
$f = json_of(req('GET', '/rl/zones/api/top?rule=flood'))->{rules}{flood};
my ($d) = grep { $_->{fingerprint} eq $fp_d } @{ $f->{keys} };
cmp_ok(4001 * 32, '>', $f->{refusals}, "the flood: the heavy key refused more than 1/32 of the window's $f->{refusals}");
ok($d, 'the flood: and listed, among 100,000 keys refused once') or diag(encode_json($f));
cmp_ok($d->{refused}, '>=', 4001, 'the flood: its count at least its refusals') if $d;
cmp_ok($d->{refused} - $d->{error}, '<=', 4001, 'the flood: at most its error more') if $d;

# Prometheus: the same entries
my $prom = req('GET', '/stats?format=prometheus')->{content};
like($prom, qr/^# TYPE nginx_ratelimit_top_refused gauge$/m, 'prometheus: the metric');
like($prom, qr/^nginx_ratelimit_top_refused\{zone="api",rule="flood",fingerprint="$fp_d"\} \Q$d->{refused}\E$/m,
     'prometheus: a key by its fingerprint, its count');
like($prom, qr/^nginx_ratelimit_top_refused\{zone="api",rule="per_user",fingerprint="$fp",key="alice"\} 1$/m,
     'prometheus: a key in clear where its rule logs keys so');
my $series = () = $prom =~ /^nginx_ratelimit_top_refused\{zone="api",rule="flood"/mg;
cmp_ok($series, '<=', 64, "prometheus: at most the summary's entries ($series)");

# a reload keeps the zone, its keys' states and its top keys
$t->reload();
is_deeply(json_of(req('GET', '/rl/zones/api/top?rule=flood'))->{rules}{flood}, $f, 'reload: the top keys kept');
is(json_of(req('GET', '/rl/zones/api/keys?key=alice&rule=per_user'))->{rules}[0]{refused}, JSON::PP::true,
   'reload: a key\'s state kept');

$t->stop();
$redis->stop if $redis;
done_testing();
