#!/usr/bin/perl
# Overrides through the key API, on a local zone with two workers: a key's
# limit raised and cut at run time with what it spent carried over exactly
# (spent 8 of 10, raised to 20: 12 more admitted, the 21st refused; cut to
# 5: refused until it owes less than 5, the Retry-After saying when), for
# every algorithm that takes a limit; deny (429, Retry-After = the time to
# the expiry; none without one) and allow (exempt); expiry, carried back as
# at its instant; address ranges, IPv4 and IPv6, the longest prefix
# winning and a key's own beating any; headers, $ratelimit_override and
# the stats; a reload keeps them, a restart reads them from the zone's
# file (and a corrupt file is said line by line, the good lines kept);
# writers in parallel through both workers, each write whole or refused;
# a full store refuses (409) and evicts nothing; every bad input a JSON
# error naming the field, never a 5xx, and JSON as JSON writes it.  An
# IPv4-mapped IPv6 address (realip, a dual-stack listener) meets the IPv4
# ranges and shares its IPv4 address's key; a key's override in every rule
# applies to the rules keyed on one expression only; the file's lines take
# the key API's checks, their errors said a few then counted.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use JSON::PP;
use Time::HiRes qw(time sleep);
use RLTest qw(json_of);

my $t = RLTest->new();
my $file = $t->prefix . '/api.overrides';

my $filed = $t->prefix . '/filed.overrides';

my $conf = <<"EOF";
ratelimit_zone api 1m overrides=64 overrides_file=$file;
ratelimit_zone small 64k overrides=3;
ratelimit_zone filed 64k overrides=4 overrides_file=$filed;
map \$http_x_none \$sl_limit { default 10; }
set_real_ip_from 127.0.0.1;
real_ip_header X-Real-IP;
server {
    listen 127.0.0.1:%%PORT%%;
    add_header X-Override "[\$ratelimit_override]" always;
    ratelimit_headers both;

    location /gcra/ { ratelimit zone=api key=\$http_x_k limit=10 period=1h name=gcra; alias %%PREFIX%%/html/; }
    location /tb/ { ratelimit zone=api key=\$http_x_k algorithm=token_bucket limit=10 period=1h name=tb; alias %%PREFIX%%/html/; }
    location /fw/ { ratelimit zone=api key=\$http_x_k algorithm=fixed_window limit=10 period=1h name=fw; alias %%PREFIX%%/html/; }
    location /sw/ { ratelimit zone=api key=\$http_x_k algorithm=sliding_window limit=10 period=1h name=sw; alias %%PREFIX%%/html/; }
    location /sl/ { ratelimit zone=api key=\$http_x_k algorithm=sliding_log limit=\$sl_limit limit_default=10 limit_max=100 period=1h name=sl; alias %%PREFIX%%/html/; }
    location /quota/ { ratelimit zone=api key=\$http_x_k algorithm=quota limit=10 reset=daily name=quota; alias %%PREFIX%%/html/; }
    location /lb/ { ratelimit zone=api key=\$http_x_k algorithm=leaky_bucket limit=10 period=1h max_delay=0 name=lb; alias %%PREFIX%%/html/; }
    location /short/ { ratelimit zone=api key=\$http_x_k limit=2 period=1h name=short; alias %%PREFIX%%/html/; }
    location /ip/ { ratelimit zone=api key=\$binary_remote_addr limit=2 period=1h name=ip; alias %%PREFIX%%/html/; }
    location /ipt/ { ratelimit zone=api key=\$remote_addr limit=2 period=1h name=ipt; alias %%PREFIX%%/html/; }
    location /both/ {
        ratelimit zone=api key=\$http_x_k limit=3 period=1h name=both_a;
        ratelimit zone=api key=\$http_x_k limit=3 period=1h name=both_b;
        alias %%PREFIX%%/html/;
    }
    location /small/ { ratelimit zone=small key=\$http_x_k limit=1 period=1h name=s; alias %%PREFIX%%/html/; }
    location /fg/ { ratelimit zone=filed key=\$http_x_k limit=10 period=1h name=g; alias %%PREFIX%%/html/; }
    location /fc/ { ratelimit zone=filed key=\$http_x_k algorithm=concurrency limit=3 name=c; alias %%PREFIX%%/html/; }

    location /rl/ { ratelimit_api write=on; }
    location /ro/ { ratelimit_api; }
    location = /stats { ratelimit_stats; }
}
EOF
# a file written by hand: an expiry three million years away, a
# concurrency limit beyond its rule's room, lines that do not read, and two
# thousand overrides beyond the zone's room of 4
my $ancient = int((time + 3e6 * 365.25 * 86400) * 1000);
RLTest::write_file($filed, join('', "# ngx-ratelimit overrides 1\n",
    "g key kept deny 0 0 0 0 0 0\n",
    "g key ancient deny 0 0 0 0 $ancient 0\n",
    "c key big limit 1 4000 0 0 0 0\n",
    map({ "broken line $_\n" } 1 .. 10),
    map({ "g key fill-$_ deny 0 0 0 0 0 0\n" } 1 .. 2000)));

$t->start($conf, workers => 2);

# ---- the file's lines: the key API's checks, errors said a few then counted

{
    like($t->error_log, qr/overrides_file "\Q$filed\E" line 3: it expires \d+ days from now: an override expires at most 366 days from when it is written: skipped/,
         'an expiry three million years away: said and skipped, as the key API refuses it');
    is($t->get('/rl/zones/filed/overrides?key=ancient&rule=g')->{status}, 404, 'and not held');
    like($t->error_log, qr/line 4: "limit": rule "c" keeps room for at most 3 a key/, 'a limit beyond its rule\'s room: said');
    is($t->get('/rl/zones/filed/overrides?key=big&rule=c')->{status}, 404, 'and not held');
    my @said = $t->error_log =~ /overrides_file "\Q$filed\E" line \d+: [^\n]*skipped/g;
    is(scalar @said, 5, 'the first five bad lines said, line by line');
    like($t->error_log, qr/overrides_file "\Q$filed\E": 7 more lines skipped, not said \(12 in all\)/, 'the rest counted');
    my @room = $t->error_log =~ /("\Q$filed\E": \d+ overrides skipped, from line \d+ on: no room \(overrides=4\))/g;
    is_deeply(\@room, [ "\"$filed\": 1997 overrides skipped, from line 18 on: no room (overrides=4)" ],
              'two thousand beyond the room: one line with the count');
    for my $log ('error.log', 'stderr.log') {
        my $lines = () = RLTest::read_file($t->prefix . "/$log") =~ /overrides_file "\Q$filed\E"/g;
        cmp_ok($lines, '<=', 7, "$log: $lines lines about the file's lines, not two thousand");
    }
    is($t->get_json('/rl/zones/filed/overrides')->{total}, 4, 'the zone holds the 4 it has room for');
    is($t->get('/fg/', { 'X-K' => 'kept' })->{status}, 429, 'the good lines apply');
}

sub hit {
    my ($path, $key, %h) = @_;
    return $t->get($path, { 'X-K' => $key, %h });
}

sub put {
    my ($query, $body, %opt) = @_;
    my $api = $opt{api} // '/rl';
    return $t->request('PUT', "$api/zones/" . ($opt{zone} // 'api') . "/overrides?$query", {}, $body);
}

sub del {
    my ($query) = @_;
    return $t->request('DELETE', "/rl/zones/api/overrides?$query");
}

# admitted requests of a key in a row, until the first refusal (at most $n)
sub admitted {
    my ($path, $key, $n) = @_;
    my $ok = 0;
    for (1 .. $n) {
        my $r = hit($path, $key);
        last unless $r->{status} == 200;
        $ok++;
    }
    return $ok;
}

# ---- carry-over at the boundary, for each algorithm that takes a limit ----

for my $alg (qw(gcra tb fw sw sl quota)) {
    my $k = "raise-$alg";
    is(admitted("/$alg/", $k, 8), 8, "$alg: 8 of 10 spent");
    my $r = put("key=$k&rule=$alg", '{"limit":20}');
    is($r->{status}, 200, "$alg: raised to 20") or diag($r->{content});
    # spent 8: 12 left under 20, so its 9th to 20th requests are admitted
    # and the 21st refused
    is(admitted("/$alg/", $k, 20), 12, "$alg: raised to 20, 12 more admitted (its 9th to 20th)");
    my $last = hit("/$alg/", $k);
    is($last->{status}, 429, "$alg: the 21st refused");
    is($last->{headers}{'x-ratelimit-limit'}, 20, "$alg: X-RateLimit-Limit states the override's limit");
    like($last->{headers}{'ratelimit-policy'} // '', qr/;q=20\b/, "$alg: RateLimit-Policy states it too")
        unless $alg eq 'lb';
    is($last->{headers}{'x-override'}, "[limit $alg key]", "$alg: \$ratelimit_override names it");

    $k = "cut-$alg";
    is(admitted("/$alg/", $k, 8), 8, "$alg: 8 of 10 spent");
    is(put("key=$k&rule=$alg", '{"limit":5}')->{status}, 200, "$alg: cut to 5");
    $r = hit("/$alg/", $k);
    is($r->{status}, 429, "$alg: cut to 5 with 8 owed: refused");
    is($r->{headers}{'x-ratelimit-limit'}, 5, "$alg: the limit stated is 5");
    if ($alg =~ /^(gcra|tb)$/) {
        # owes 8 of 5 an hour: admitted again once it owes 4, 4 units at
        # 720 s each from now
        my $ra = $r->{headers}{'retry-after'};
        ok($ra >= 2878 && $ra <= 2880, "$alg: Retry-After $ra: 4 units at the new pace (2880 s)");
    }
    is(del("key=$k&rule=$alg")->{status}, 200, "$alg: override removed");
    $r = hit("/$alg/", $k);
    is($r->{status}, 200, "$alg: back at 10 with 8 owed: the 9th admitted");
    is($r->{headers}{'x-ratelimit-limit'}, 10, "$alg: the rule's limit stated again");
    is($r->{headers}{'x-override'}, '[]', "$alg: no override named");
}

# leaky_bucket paces: a key owes its queue, whose wait follows the pace
{
    my $k = 'leaky';
    my $wait = sub { my $r = hit('/lb/', $k); ($r->{status}, $r->{headers}{'retry-after'}, $r->{headers}{'x-ratelimit-limit'}) };
    is(hit('/lb/', $k)->{status}, 200, 'lb: one admitted at 10 an hour');
    my ($s, $ra) = $wait->();
    ok($s == 429 && $ra >= 359 && $ra <= 360, "lb: the next waits its 360 s ($ra)");
    put("key=$k&rule=lb", '{"limit":20}');
    ($s, $ra, my $l) = $wait->();
    ok($s == 429 && $ra >= 179 && $ra <= 180 && $l == 20, "lb: raised to 20 an hour, 180 s ($ra)");
    put("key=$k&rule=lb", '{"limit":5}');
    ($s, $ra) = $wait->();
    ok($s == 429 && $ra >= 719 && $ra <= 720, "lb: cut to 5 an hour, 720 s ($ra)");
    put("key=$k&rule=lb", '{"period":"2h"}');
    ($s, $ra) = $wait->();
    ok($s == 429 && $ra >= 719 && $ra <= 720, "lb: 10 in 2 h is the rule's pace at 5 an hour: 720 s ($ra)");
    del("key=$k&rule=lb");
    ($s, $ra) = $wait->();
    ok($s == 429 && $ra >= 359 && $ra <= 360, "lb: removed, the rule's 360 s again ($ra)");
}

# ---- deny and allow ----

{
    my $k = 'denied';
    is(hit('/gcra/', $k)->{status}, 200, 'deny: a key spends one');
    my $r = put("key=$k&keyed=\$http_x_k", '{"action":"deny","expire":"1h"}');
    is($r->{status}, 200, 'deny in every rule keyed on $http_x_k, for an hour') or diag($r->{content});
    my $j = json_of($r);
    is($j->{override}{action}, 'deny', 'the answer says deny');
    is($j->{override}{rule}, undef, 'in every rule');
    is($j->{override}{keyed}, '$http_x_k', 'keyed on $http_x_k');
    ok($j->{override}{expires_in_ms} > 3_599_000, 'expires in an hour');
    $r = hit('/gcra/', $k);
    is($r->{status}, 429, 'a denied key is refused');
    my $ra = $r->{headers}{'retry-after'};
    ok($ra >= 3599 && $ra <= 3600, "Retry-After $ra: the time until the override expires");
    is($r->{headers}{'x-override'}, '[deny * key]', '$ratelimit_override: deny * key');
    is(hit('/fw/', $k)->{status}, 429, 'and refused by every rule of the zone');
    hit('/gcra/', $k) for 1 .. 20;
    is(del("key=$k")->{status}, 400, 'removing it in a zone keyed on several expressions names the expression');
    is(del("key=$k&keyed=\$http_x_k")->{status}, 200, 'deny removed');
    $r = hit('/gcra/', $k);
    is($r->{headers}{'x-ratelimit-remaining'}, 8, 'the refusals spent nothing: 2 of 10 spent');

    put("key=forever&rule=gcra", '{"action":"deny"}');
    $r = hit('/gcra/', 'forever');
    is($r->{status}, 429, 'a deny without expiry refuses');
    ok(!exists $r->{headers}{'retry-after'}, 'with no Retry-After: there is no time to wait for');
    is(hit('/fw/', 'forever')->{status}, 200, 'in its rule only');

    put("key=partner&rule=short", '{"action":"allow"}');
    my @s = map { hit('/short/', 'partner') } 1 .. 5;
    is(RLTest::statuses_of(@s), '200 200 200 200 200', 'an allowed key passes its rule uncounted');
    ok(!exists $s[0]{headers}{'x-ratelimit-limit'}, 'exempt: no rate-limit headers');
    is($s[0]{headers}{'x-override'}, '[allow short key]', '$ratelimit_override: allow short key');
    del("key=partner&rule=short");
    is($t->statuses('/short/', 3, { 'X-K' => 'partner' }), '200 200 429', 'removed: its own 2, nothing spent before');
}

# ---- expiry, carried back as at its instant ----

{
    my $k = 'expiring';
    is($t->statuses('/short/', 3, { 'X-K' => $k }), '200 200 429', 'expiry: 2 of 2 spent');
    my $r = put("key=$k&rule=short", '{"limit":5,"expire":"1500ms"}');
    my $until = time + 1.5;
    is($r->{status}, 200, 'raised to 5 for 1.5 s');
    is(admitted('/short/', $k, 10), 3, '3 more under 5');
    sleep(0.05) while time < $until + 0.1;
    $r = hit('/short/', $k);
    is($r->{status}, 429, 'expired: back to 2 an hour, owing 5');
    # owes 5 at the expiry; one more is admitted once it owes 1: 4 units
    # at 1800 s each from the expiry
    my $ra = $r->{headers}{'retry-after'};
    ok($ra >= 7195 && $ra <= 7200, "Retry-After $ra: what it owes carried back (7200 s)");
    is($r->{headers}{'x-override'}, '[]', 'no override applies');
    my $get = $t->get("/rl/zones/api/overrides?key=$k&rule=short");
    is($get->{status}, 404, 'an expired override is gone');
}

# ---- ranges ----

{
    my $r = put('range=10.1.0.0/16&rule=ip', '{"action":"deny","expire":"1h"}');
    is($r->{status}, 200, 'deny 10.1.0.0/16') or diag($r->{content});
    is(put('range=10.1.2.0/24&rule=ip', '{"action":"allow"}')->{status}, 200, 'allow 10.1.2.0/24 inside it');
    is(put('range=2001:db8::/32', '{"action":"deny"}')->{status}, 200, 'deny 2001:db8::/32 in every rule');
    my $ip = sub { $t->get('/ip/', { 'X-Real-IP' => $_[0] }) };
    is($ip->('10.1.9.9')->{status}, 429, '10.1.9.9 denied by the /16');
    is($ip->('10.1.9.9')->{headers}{'x-override'}, '[deny ip 10.1.0.0/16]', 'named with its range');
    is(join(' ', map { $ip->('10.1.2.3')->{status} } 1 .. 4), '200 200 200 200', '10.1.2.3 allowed: the /24 wins');
    is($ip->('10.1.2.3')->{headers}{'x-override'}, '[allow ip 10.1.2.0/24]', 'the longest prefix named');
    is(join(' ', map { $ip->('10.2.0.1')->{status} } 1 .. 3), '200 200 429', '10.2.0.1: no range, its own limit');
    is($ip->('2001:db8:1::5')->{status}, 429, 'an IPv6 address in the /32 denied');
    is($ip->('2001:db9::5')->{status}, 200, 'one outside it not');
    is($t->get('/ipt/', { 'X-Real-IP' => '2001:db8::1' })->{headers}{'x-override'}, '[deny * 2001:db8::/32]',
       'a rule keyed on $remote_addr meets the range too');
    # a key's own override beats any range
    is(put('key=%0A%01%09%09&rule=ip', '{"limit":3}')->{status}, 200, 'a key of 10.1.9.9 (binary) raised');
    is($ip->('10.1.9.9')->{headers}{'x-override'}, '[limit ip key]', 'the key\'s own override beats the range');
    is(put('range=10.1.0.0/16&rule=gcra', '{"action":"deny"}')->{status}, 400,
       'a range on a rule not keyed on the address: 400');
}

# ---- an IPv4-mapped address is its IPv4 address ----

{
    my $ip = sub { my ($path, $addr) = @_; $t->get($path, { 'X-Real-IP' => $addr }) };
    my $r = put('range=10.7.2.0/24', '{"action":"deny","expire":"1h"}');
    is($r->{status}, 200, 'deny 10.7.2.0/24 in every rule keyed on the address') or diag($r->{content});
    for my $path ('/ip/', '/ipt/') {
        is($ip->($path, '10.7.2.3')->{status}, 429, "$path: 10.7.2.3 denied");
        $r = $ip->($path, '::ffff:10.7.2.3');
        is($r->{status}, 429, "$path: ::ffff:10.7.2.3 (realip of a proxy sending mapped addresses) denied too");
        is($r->{headers}{'x-override'}, '[deny * 10.7.2.0/24]', "$path: by the IPv4 range");
    }
    # one client, one key: its two forms share its budget of 2
    is(join(' ', map { $ip->('/ip/', $_)->{status} } '10.8.0.1', '::ffff:10.8.0.1', '10.8.0.1', '::ffff:10.8.0.1'),
       '200 200 429 429', '$binary_remote_addr: 10.8.0.1 and ::ffff:10.8.0.1 are one key');
    is(join(' ', map { $ip->('/ipt/', $_)->{status} } '::ffff:10.8.0.2', '10.8.0.2', '::ffff:10.8.0.2'),
       '200 200 429', '$remote_addr: alike');
    my $k = $t->get_json('/rl/zones/api/keys?key=10.8.0.2&rule=ipt');
    is($k->{rules}[0]{remaining}, 0, 'the key API finds it as its IPv4 address');
    # a range written as mapped addresses is the IPv4 range
    $r = put('range=::ffff:10.7.3.0/120&rule=ipt', '{"action":"deny"}');
    is(json_of($r)->{override}{range}, '10.7.3.0/24', '::ffff:10.7.3.0/120 is held as 10.7.3.0/24');
    is($ip->('/ipt/', '10.7.3.9')->{status}, 429, 'and meets 10.7.3.9');
    is($ip->('/ipt/', '::ffff:10.7.3.9')->{status}, 429, 'and ::ffff:10.7.3.9');
    is($ip->('/ipt/', '10.7.4.9')->{status}, 200, 'not 10.7.4.9');
    # an IPv6 address that is not a mapped one keeps its own key
    is(join(' ', map { $ip->('/ipt/', $_)->{status} } '::10.8.0.3', '10.8.0.3', '10.8.0.3', '::10.8.0.3'),
       '200 200 200 200', '::10.8.0.3 (not a mapped address) is another key than 10.8.0.3');
}

# ---- a key in every rule: the rules keyed on its expression only ----

{
    # zone api's rules are keyed on $http_x_k, $binary_remote_addr and
    # $remote_addr: the same bytes are other keys in each
    my $r = put('key=10.9.9.9', '{"action":"allow"}');
    is($r->{status}, 400, 'a key without rule= in a zone keyed on several expressions: 400');
    like(json_of($r)->{error}, qr/the zone's rules are keyed on different expressions \(rule "[a-z_]+" on "\$[a-z_]+", rule "[a-z_]+" on "\$[a-z_]+"\)/,
         'naming them');
    like(json_of($r)->{error}, qr/name the rule \(rule=\), or the key expression of the rules it applies to \(keyed=, e\.g\. keyed=\$[a-z_]+\), or, for a client's address, give range=ADDRESS\/32/,
         'and what to give');
    $r = put('key=10.9.9.9&keyed=$remote_addr', '{"action":"allow"}');
    is($r->{status}, 200, 'keyed=$remote_addr: the rules keyed on $remote_addr') or diag($r->{content});
    is(json_of($r)->{override}{keyed}, '$remote_addr', 'the answer names the expression');
    is(join(' ', map { $t->get('/ipt/', { 'X-Real-IP' => '10.9.9.9' })->{status} } 1 .. 4), '200 200 200 200',
       'the client 10.9.9.9 is exempt from ipt');
    is($t->statuses('/short/', 3, { 'X-K' => '10.9.9.9' }), '200 200 429',
       'a header saying 10.9.9.9 is not: another key, in a rule keyed otherwise');
    is(join(' ', map { $t->get('/ip/', { 'X-Real-IP' => '10.9.9.9' })->{status} } 1 .. 3), '200 200 429',
       'nor the rule keyed on $binary_remote_addr (other bytes: a range covers both)');
    is(put('key=x&keyed=$http_x_nope', '{"action":"deny"}')->{status}, 400, 'keyed= naming no rule\'s expression: 400');
    is(put('key=x&rule=gcra&keyed=$http_x_k', '{"action":"deny"}')->{status}, 400, 'keyed= with rule=: 400');
    is(del('key=10.9.9.9&keyed=$remote_addr')->{status}, 200, 'removed');
    # a zone whose rules share one expression takes it
    $r = put('key=solo', '{"action":"deny"}', zone => 'small');
    is($r->{status}, 200, 'a key without rule= in a zone keyed on one expression') or diag($r->{content});
    is(json_of($r)->{override}{keyed}, '$http_x_k', 'bound to it');
    is($t->get('/small/', { 'X-K' => 'solo' })->{status}, 429, 'and applied');
    is($t->request('DELETE', '/rl/zones/small/overrides?key=solo')->{status}, 200, 'removed');
}

# ---- stats, the list, the file, a reload, a restart ----

{
    my $z = $t->zone_stats('api');
    ok($z->{overrides} >= 8, "stats: $z->{overrides} overrides held");
    is($z->{overrides_capacity}, 64, 'and room for 64');
    ok($t->rule_stats('api', 'gcra')->{overridden} > 10, 'requests that met one, by rule');
    is($t->rule_stats('api', 'ip')->{overrides}, 3, 'overrides naming rule ip: 3');
    my $l = $t->get_json('/rl/zones/api/overrides?rule=ip');
    is($l->{total}, 3, 'the list by rule: 3');
    my $p = $t->get_json('/rl/zones/api/overrides?from=1&count=2');
    is(scalar @{ $p->{overrides} }, 2, 'a page of 2');
    is($p->{from}, 1, 'from 1');
    my $all = $t->get_json('/rl/zones/api/overrides?count=1000');
    is($all->{total}, $z->{overrides}, 'the whole list');

    # the file follows within a second
    RLTest::wait_until(sub { (() = RLTest::read_file($file) =~ /\n/g) == $all->{total} + 1 }, 5);
    my @lines = split /\n/, RLTest::read_file($file);
    is(scalar @lines, $all->{total} + 1, 'the file holds every override and its header');

    $t->reload;
    is($t->get('/ip/', { 'X-Real-IP' => '10.1.9.9' })->{headers}{'x-override'}, '[limit ip key]', 'a reload keeps them');

    $t->stop;
    # a corrupt line and a truncated last line: said, the rest read
    RLTest::write_file($file, RLTest::read_file($file) . "gcra key %zz limit 1 5 0 0 0 0\nbroken line\n* range 10.9");
    $t->start;
    like($t->error_log, qr/overrides_file "\Q$file\E" line \d+: .*skipped/, 'a bad line said, naming file and line');
    like($t->error_log, qr/line \d+: truncated/, 'a truncated line said');
    is($t->get('/ip/', { 'X-Real-IP' => '10.1.9.9' })->{headers}{'x-override'}, '[limit ip key]',
       'a restart reads them back');
    is($t->get('/ip/', { 'X-Real-IP' => '10.1.7.7' })->{status}, 429, 'the range too');
    is(hit('/gcra/', 'forever')->{status}, 429, 'and the deny');
}

# ---- writers in parallel, a full store ----

{
    my @pids;
    for my $w (1 .. 4) {
        my $pid = fork() // die;
        if ($pid == 0) {
            for my $i (1 .. 10) {
                put("key=w$w-$i&rule=s", '{"limit":2}', zone => 'small');
            }
            POSIX::_exit(0);
        }
        push @pids, $pid;
    }
    waitpid($_, 0) for @pids;
    my $l = $t->get_json('/rl/zones/small/overrides?count=1000');
    is($l->{total}, 3, 'forty writers at once on a store of 3: exactly 3 held');
    my $ok = grep { defined $_->{limit} && $_->{limit} == 2 && $_->{key} =~ /^w\d-\d+$/ } @{ $l->{overrides} };
    is($ok, 3, 'each written whole');
    my $r = put('key=late&rule=s', '{"limit":2}', zone => 'small');
    is($r->{status}, 409, 'full: 409');
    like(json_of($r)->{error} // '', qr/as many overrides as it has room for/, 'saying so');
    is($t->get_json('/rl/zones/small/overrides')->{total}, 3, 'nothing evicted');
}

# ---- bad input: a JSON error, never a 5xx ----

for my $case (
    [ 'key=a&rule=gcra', '{"limit":', 400, qr/"limit": not JSON at "": no value/ ],
    [ 'key=a&rule=gcra', '{"limits":5}', 400, qr/unknown field "limits": expected limit, burst, period, action or expire/ ],
    [ 'key=a&rule=gcra', '{"limit":0}', 400, qr/"limit": expected an integer from 1 to 1000000000/ ],
    [ 'key=a&rule=gcra', '{"limit":1000000001}', 400, qr/"limit": expected an integer/ ],
    [ 'key=a&rule=gcra', '{"limit":5,"limit":6}', 400, qr/given twice/ ],
    [ 'key=a&rule=gcra', '{"period":"0s"}', 400, qr/"period": expected a time/ ],
    [ 'key=a&rule=gcra', '{"period":"367d"}', 400, qr/"period": expected a time from 1ms to 366d/ ],
    [ 'key=a&rule=gcra', '{"expire":"soon"}', 400, qr/"expire": expected a time/ ],
    [ 'key=a&rule=gcra', '{"action":"ban"}', 400, qr/"action": expected "limit", "deny" or "allow"/ ],
    [ 'key=a&rule=gcra', '{"action":"deny","limit":3}', 400, qr/takes no limit/ ],
    [ 'key=a&rule=gcra', '{}', 400, qr/a limit override sets limit, burst or period/ ],
    [ 'key=a', '{"limit":5}', 400, qr/a limit override names its rule/ ],
    [ 'key=a&rule=fw', '{"burst":5}', 400, qr/"burst": rule "fw" \(algorithm=fixed_window\) takes no burst override/ ],
    [ 'key=a&rule=quota', '{"period":"1m"}', 400, qr/takes no period override/ ],
    [ 'key=a&rule=sl', '{"limit":101}', 400, qr/at most 100 a key/ ],
    [ 'key=a&rule=nope', '{"limit":5}', 404, qr/zone "api" has no rule "nope"/ ],
    [ 'range=10.1.0.1/16&rule=ip', '{"action":"deny"}', 400, qr/is not a network/ ],
    [ 'range=10.1.0.0/33&rule=ip', '{"action":"deny"}', 400, qr/prefix length must be an integer from 0 to 32/ ],
    [ 'range=banana/8&rule=ip', '{"action":"deny"}', 400, qr/is not an IPv4 or IPv6 address/ ],
    [ 'range=10.1.0.0/16&rule=ip', '{"action":"limit","limit":3}', 400, qr/a range takes "action":"deny" or "allow"/ ],
    [ 'key=a&range=10.0.0.0/8', '{"action":"deny"}', 400, qr/give one/ ],
    [ 'rule=gcra', '{"limit":5}', 400, qr/which override\?/ ],
    # what JSON does not allow
    [ 'key=a&rule=gcra', '{"limit":01}', 400, qr/"limit": not JSON at "01}": a number with a leading zero/ ],
    [ 'key=a&rule=gcra', '{"limit":+1}', 400, qr/"limit": not JSON at "\+1}": a '\+' before a number/ ],
    [ 'key=a&rule=gcra', '{"limit":1.}', 400, qr/"limit": not JSON at "1.}": a '.' with no digits after it/ ],
    [ 'key=a&rule=gcra', '{"limit":.5}', 400, qr/a number with no digit before its '.'/ ],
    [ 'key=a&rule=gcra', '{"limit":1e2}', 400, qr/"limit": expected an integer from 1 to 1000000000, not a number with a sign, a fraction or an exponent/ ],
    [ 'key=a&rule=gcra', '{"limit":true}', 400, qr/not true or false/ ],
    [ 'key=a&rule=gcra', '{"limit":5,}', 400, qr/not a JSON object of fields/ ],
    [ 'key=a&rule=gcra', '{"limit":5}}', 400, qr/text after the JSON object/ ],
) {
    my ($q, $body, $status, $re) = @$case;
    my $r = put($q, $body);
    is($r->{status}, $status, "PUT ?$q $body: $status");
    like(json_of($r)->{error} // '', $re, '  with a message naming what is wrong') or diag($r->{content});
}
is($t->request('PUT', '/rl/zones/nope/overrides?key=a&rule=x', {}, '{"limit":1}')->{status}, 404, 'an unknown zone: 404');
is($t->request('PUT', '/ro/zones/api/overrides?key=a&rule=gcra', {}, '{"limit":5}')->{status}, 403,
   'writes where the API is read-only: 403');
is($t->request('DELETE', '/rl/zones/api/overrides?key=none&rule=gcra')->{status}, 404, 'removing no override: 404');
is($t->request('PUT', '/rl/zones/api/overrides?key=a&rule=gcra', {}, '{"limit":5}' . (' ' x 5000))->{status}, 413,
   'a body too large: 413');
is($t->request('POST', '/rl/zones/api/overrides?key=a&rule=gcra', {}, '{"limit":5}')->{status}, 405, 'POST: 405');

like($t->error_log, qr/ratelimit: override of key fingerprint [0-9a-f]{16} in rule "gcra" of zone "api" set: limit 20 by the key API, client 127\.0\.0\.1/,
     'each write logged at notice, with who asked');
unlike($t->error_log, qr/raise-gcra/, 'never the key in clear for a rule that does not log keys so');

$t->stop;

# ---- a dual-stack listener: an IPv4 client's address is a mapped one ----

SKIP: {
    skip 'no IPv6 loopback on this machine', 5
        unless -e '/proc/net/if_inet6' && RLTest::read_file('/proc/net/if_inet6') =~ /\blo$/m;
    my $ds = RLTest->new();
    $ds->start(<<'EOF');
ratelimit_zone ds 64k overrides=4;
server {
    listen [::]:%%PORT%% ipv6only=off;
    add_header X-Addr $remote_addr always;
    location /b/ { ratelimit zone=ds key=$binary_remote_addr limit=2 period=1h name=b; alias %%PREFIX%%/html/; }
    location /t/ { ratelimit zone=ds key=$remote_addr limit=2 period=1h name=t; alias %%PREFIX%%/html/; }
    location /rl/ { ratelimit_api write=on; }
}
EOF
    my $r = $ds->get('/t/');
    is($r->{headers}{'x-addr'}, '::ffff:127.0.0.1', 'an IPv4 client of [::] with ipv6only=off is ::ffff:127.0.0.1');
    is($ds->get_json('/rl/zones/ds/keys?key=127.0.0.1&rule=t')->{rules}[0]{remaining}, 1,
       'its key is 127.0.0.1: 1 of 2 left');
    is($ds->request('PUT', '/rl/zones/ds/overrides?range=127.0.0.0/8&rule=b', {}, '{"action":"deny"}')->{status}, 200,
       'deny 127.0.0.0/8');
    is($ds->get('/b/')->{status}, 429, 'it meets the IPv4 range');
    is($ds->get('/t/')->{status}, 200, 'in its rule only');
    $ds->stop;
}

done_testing();
